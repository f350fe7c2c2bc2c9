"""test_env_reads.py: the environment is read in one place, engine/options.c.

- No C or CUDA file of the product (cmd/, server/, engine/, models/,
  kernels/, bench/) calls getenv, secure_getenv or reads environ but
  engine/options.c; kernels/ reads none at all (the engine hands the kernels
  their settings). cmd/main.c's OpenMP restart asks the options module too.
- Tests read only test-only variables (TEST_ONLY below: they steer a test
  program, they are not server options).
- Every MANTISSA_* variable named anywhere (code, scripts, docs; not
  bench/results, which is history) is a row of the table, a test-only
  variable, or a macro of ours.
- The old MT_CUDA_* names appear only in the table (its "old" column) and
  in the tests of the warning.
The integration side (a bad value refused, an old name honoured, --help and
the README listing the table) is tests/integration/test_options.py.
"""
import os
import re
import subprocess

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PRODUCT_DIRS = ["cmd", "server", "engine", "models", "kernels", "bench"]
OPTIONS_C = "engine/options.c"

# Variables the test programs read for themselves; none is a server option.
TEST_ONLY = {
    "MANTISSA_EMULATED": "tests/arm64.sh: under qemu, skip timings and cut grids",
    "MANTISSA_MODEL_DIR": "the fuzzers' model directory",
    "MANTISSA_VOCAB": "the tokenizer fuzzer's vocab.txt",
    "MANTISSA_BIN": "the Python tests' binary",
    "FUZZ_JSON_LENIENT": "a fuzzer's mode",
    "NUMFMT_FIXTURES": "test_numfmt's fixture file",
    "QUANT_TEST_SEED": "test_quant's seed",
    "QGEMM_TEST_SEED": "test_qgemm's seed of its fresh int8 inputs",
    "TMPDIR": "the fuzzers' scratch directory",
    "PYTHON": "test_distilbert's interpreter for tools/make-distilbert.py",
}
# MANTISSA_ names that are not environment variables.
MACROS = {"MANTISSA_VERSION", "MANTISSA_COMMIT", "MANTISSA_KERNELS_CUDA_W8A16_DEV_CUH"}

ENV_READ = re.compile(r"\b(?:secure_getenv|getenv|__environ|environ)\b")
ENV_NAME = re.compile(r'\b(?:secure_)?getenv\s*\(\s*"([A-Za-z0-9_]+)"')


def strip_comments(text):
    """C text without comments and string contents (so a comment naming
    getenv is not a read, and a string "getenv" neither)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def reads_env(text):
    return bool(ENV_READ.search(strip_comments(text)))


def c_files(dirs):
    for top in dirs:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if os.path.relpath(d, ROOT).startswith("bench/results"):
                continue
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def table():
    """(name, old name or None) of each row of engine/options.c's table."""
    rows = re.findall(r'\[MT_OPT_\w+\]\s*=\s*\{\s*"(\w+)",\s*(NULL|"\w+")', read(OPTIONS_C))
    return [(n, None if o == "NULL" else o.strip('"')) for n, o in rows]


def test_the_scanner_sees_a_read_and_ignores_comments_and_strings():
    assert reads_env('int f(void) { return getenv("X") != 0; }')
    assert reads_env("extern char **environ;")
    assert reads_env('const char *v = secure_getenv ("X");')
    assert not reads_env('/* getenv("X") */ int x; // environ\nconst char *s = "getenv";')


def test_the_table_has_every_option_and_the_old_names():
    rows = table()
    names = {n for n, _ in rows}
    assert len(rows) >= 19, rows
    assert "ONEDNN_MAX_CPU_ISA" in names and "MANTISSA_INT8_KERNEL" in names
    ours = [n for n in names if n.startswith("MANTISSA_")]
    others = sorted(names - set(ours))
    assert others == ["GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                      "ONEDNN_MAX_CPU_ISA"], others
    olds = {o: n for n, o in rows if o}
    assert all(o.startswith("MT_") and n == "MANTISSA_" + o[3:] for o, n in olds.items()), olds


def test_only_the_options_module_reads_the_environment():
    bad = [p for p in c_files(PRODUCT_DIRS) if p != OPTIONS_C and reads_env(read(p))]
    assert not bad, ("these read the environment; add a row to engine/options.c's table "
                     "and use mt_opt_int / mt_opt_text instead:\n" + "\n".join(bad))
    assert reads_env(read(OPTIONS_C))


def test_kernels_read_no_environment():
    bad = [p for p in c_files(["kernels"]) if reads_env(read(p))]
    assert not bad, ("kernels/ reads no variable: take the setting as a parameter or a "
                     "setter the engine calls (engine/options.c hand_to_kernels):\n"
                     + "\n".join(bad))


def test_tests_read_only_test_only_variables():
    seen = {}
    for p in c_files(["tests"]):
        for name in ENV_NAME.findall(read(p)):
            seen.setdefault(name, []).append(p)
    bad = {n: ps for n, ps in seen.items() if n not in TEST_ONLY}
    assert not bad, ("tests read server options from the environment; use the setters "
                     "(kc_s8_force, kc_h16_set_enabled, ...) or add a test-only name: %r" % bad)


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return [p for p in out if p and not p.startswith("bench/results/")
            and os.path.isfile(os.path.join(ROOT, p))]


def readme_without_table(text):
    return re.sub(r"<!-- options: generated.*?<!-- options: end -->", "", text, flags=re.S)


def test_every_mantissa_variable_named_is_in_the_table():
    known = {n for n, _ in table()} | set(TEST_ONLY) | MACROS
    bad = {}
    for p in tracked_files():
        if p.endswith((".png", ".svg", ".safetensors", ".bin")):
            continue
        for name in set(re.findall(r"\bMANTISSA_[A-Z0-9_]*[A-Z0-9]\b", read(p))):
            if name not in known:
                bad.setdefault(name, []).append(p)
    assert not bad, "MANTISSA_ names that are no option (add a row, or fix the name): %r" % bad


def test_old_names_appear_only_in_the_table_and_its_tests():
    olds = {o for _, o in table() if o}
    allowed = {OPTIONS_C, "engine/options.h", "tests/structure/test_env_reads.py",
               "tests/integration/test_options.py"}
    bad = {}
    for p in tracked_files():
        if p in allowed:
            continue
        text = read(p)
        if p == "README.md":
            text = readme_without_table(text)
        for o in olds:
            if re.search(r"\b%s\b" % o, text):
                bad.setdefault(o, []).append(p)
    assert not bad, "old names still set or named (use the MANTISSA_ name): %r" % bad
