"""Integration tests of the runtime options (engine/options.h) on the real
binary: a bad value stops the start with a message naming the variable and
its allowed values; an old MT_CUDA_* name is honoured with one warning line
naming the new name (the new name wins where both are set; serve writes it in
its log's format); the settings
reach the kernels (a forced int8 kernel, the FP16 kernel switch, the ISA
cap); `mantissa serve --help` lists every row of the table; the README's
list is exactly `mantissa options --markdown`."""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT, Server, default_config

OPTIONS_C = os.path.join(ROOT, "engine", "options.c")
README = os.path.join(ROOT, "README.md")


def clean_env(**extra):
    """The environment without any option set (and with the OpenMP restart
    allowed, so a warning printed before it would show twice)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MANTISSA_", "MT_", "ONEDNN_", "DNNL_"))
           and k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(extra)
    return env


def run(args, **env):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=120,
                          env=clean_env(**env))


def table_rows():
    """(name, values, default) of each row of the source's table."""
    src = open(OPTIONS_C).read()
    isa = re.search(r'#else\s*#define ISA_VALUES\s*\\?\s*((?:"[^"]*"\s*\\?\s*)+)', src)
    isa_values = "".join(re.findall(r'"([^"]*)"', isa.group(1)))
    rows = []
    for m in re.finditer(r'\[MT_OPT_\w+\]\s*=\s*\{\s*"(\w+)",\s*(?:NULL|"\w+"),\s*MT_OPT_\w+,'
                         r'\s*((?:"[^"]*"\s*)+|ISA_VALUES),\s*-?\d+,\s*-?\d+,\s*"([^"]*)"', src):
        values = isa_values if m.group(2) == "ISA_VALUES" else "".join(
            re.findall(r'"([^"]*)"', m.group(2)))
        rows.append((m.group(1), values, m.group(3)))
    return rows


@pytest.mark.parametrize("var,value,allowed", [
    ("MANTISSA_CUDA_GEMM", "fast", "auto|fused|library"),
    ("MANTISSA_NO_H16_KERNEL", "yes", "0|1"),
    ("MANTISSA_CUDA_CROSSOVER", "-4", "0..1000000"),
    ("MANTISSA_CUDA_GRAPHS", "1x", "0|1|2"),
    ("MANTISSA_INT8_KERNEL", "avx3", "auto|onednn|amx"),
    ("ONEDNN_MAX_CPU_ISA", "AVX3", "AVX2|AVX2_VNNI"),
])
def test_a_bad_value_stops_the_start_naming_the_variable_and_its_values(tmp_path, var, value,
                                                                         allowed):
    cfg = tmp_path / "mantissa.json"
    cfg.write_text('{"models": []}')
    for args in (["serve", "--config", str(cfg), "--listen", "127.0.0.1:0"], ["cpu"]):
        r = run(args, **{var: value})
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith("mantissa: %s=%s: not allowed; %s takes " % (var, value, var)), \
            r.stderr
        assert allowed in line, r.stderr
        assert "serving on" not in r.stderr and r.stdout == ""


def test_an_empty_value_is_the_default():
    r = run(["cpu"], MANTISSA_INT8_KERNEL="", ONEDNN_MAX_CPU_ISA="AVX2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^  int8 +avx2_signc$", r.stdout, re.M), r.stdout


def test_an_old_name_is_honoured_with_one_warning_naming_the_new_one():
    r = run(["cpu"], MT_CUDA_GEMM="fused")
    assert r.returncode == 0, r.stderr
    warn = [l for l in r.stderr.splitlines() if "MT_CUDA_GEMM" in l]
    assert warn == ["mantissa: MT_CUDA_GEMM is the old name of MANTISSA_CUDA_GEMM: honoured "
                    "for now, please rename it"], r.stderr
    # its value is read and checked as the new name's would be
    bad = run(["cpu"], MT_CUDA_GEMM="fast")
    assert bad.returncode == 2 and "MT_CUDA_GEMM=fast: not allowed" in bad.stderr, bad.stderr
    assert "auto|fused|library" in bad.stderr
    # where both are set the new name wins, and the warning says the old one is ignored
    both = run(["cpu"], MT_CUDA_GEMM="fast", MANTISSA_CUDA_GEMM="library")
    assert both.returncode == 0, both.stderr
    assert "MT_CUDA_GEMM is the old name of MANTISSA_CUDA_GEMM, which is also set: " \
           "MT_CUDA_GEMM ignored" in both.stderr, both.stderr


def test_the_server_warns_once_about_an_old_name(tmp_path):
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.skip("model not fetched (run make model)")
    # in the log's format (server.log_format): a JSON warn line, or the text line
    for log_format in ("json", "text"):
        srv = Server(default_config(log_format=log_format), tmp_path,
                     env=clean_env(MT_CUDA_GRAPHS="0"))
        try:
            warn = [l for l in srv.log if "MT_CUDA_GRAPHS" in l]
            assert len(warn) == 1 and "MANTISSA_CUDA_GRAPHS" in warn[0], srv.log
        finally:
            srv.stop()
        if log_format == "json":
            ev = json.loads(warn[0])
            assert ev["level"] == "warn" and ev["msg"].startswith(
                "MT_CUDA_GRAPHS is the old name of MANTISSA_CUDA_GRAPHS"), ev
        else:
            assert warn[0].startswith("mantissa: MT_CUDA_GRAPHS is the old name of "
                                      "MANTISSA_CUDA_GRAPHS"), warn


def test_the_settings_reach_the_kernels():
    at_avx2 = run(["cpu"], ONEDNN_MAX_CPU_ISA="avx2")  # oneDNN's names, any case
    assert at_avx2.returncode == 0, at_avx2.stderr
    assert re.search(r"^isa: avx2 \(ONEDNN_MAX_CPU_ISA=avx2\)$", at_avx2.stdout, re.M)
    assert re.search(r"^  int8 +avx2_signc$", at_avx2.stdout, re.M), at_avx2.stdout
    assert re.search(r"^  fp16 +avx2_h16$", at_avx2.stdout, re.M), at_avx2.stdout
    off2 = run(["cpu"], ONEDNN_MAX_CPU_ISA="avx2", MANTISSA_NO_H16_KERNEL="1").stdout
    assert re.search(r"^  fp16 +decode_sgemm$", off2, re.M), off2
    forced = run(["cpu"], ONEDNN_MAX_CPU_ISA="AVX2", MANTISSA_INT8_KERNEL="avx2_i16")
    assert re.search(r"^  int8 +avx2_i16$", forced.stdout, re.M), forced.stdout
    top = run(["cpu"]).stdout
    if not re.search(r"^  fp16 +avx512_h16$", top, re.M):
        pytest.skip("no AVX-512 here: the FP16 kernel switch changes nothing")
    off = run(["cpu"], MANTISSA_NO_H16_KERNEL="1").stdout
    assert re.search(r"^  fp16 +decode_sgemm$", off, re.M), off


def test_serve_help_lists_every_option_of_the_table():
    rows = table_rows()
    assert len(rows) >= 19, rows
    r = run(["serve", "--help"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: mantissa serve"), r.stdout
    for name, values, dflt in rows:
        assert re.search(r"^  %s(=| )" % re.escape(name), r.stdout, re.M), name
        if "OMP" not in name:
            assert "%s=%s  (default %s" % (name, values, dflt) in r.stdout, name


def test_the_readme_lists_exactly_the_binarys_options():
    md = run(["options", "--markdown"])
    assert md.returncode == 0, md.stderr
    text = open(README).read()
    m = re.search(r"<!-- options: generated[^\n]*-->\n(.*?)<!-- options: end -->", text, re.S)
    assert m, "README.md has no generated options section"
    assert m.group(1) == md.stdout, (
        "README.md's options table differs from `mantissa options --markdown`: paste that "
        "output between the two <!-- options --> markers (tools/readme-options.py does)")
    for name, _, _ in table_rows():
        assert "`%s`" % name in md.stdout, name
