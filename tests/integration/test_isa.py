"""Integration tests of the CPU's instruction-set level and the load check:
the real binary, stepped down with ONEDNN_MAX_CPU_ISA, names the level and
the kernel of each build (start-up log, /metrics, `mantissa cpu`); and a
build whose int8 kernel computes wrong sums (oneDNN's int8 matmul forced on
a level without VNNI, where its 16-bit pair sums saturate) is refused by the
load check, at start (the server does not start) and on a reload (the old
build keeps serving)."""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT, Server
from test_hotswitch import (embed, metrics, model_cfg, server_cfg, variants_of, wait_until,
                            write_config)

import http.client


def levels():
    out = subprocess.run([BIN, "cpu", "--levels"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def env_at(level, **extra):
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=level)
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def need_model():
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.skip("model not fetched (run make model)")


def test_mantissa_cpu_names_the_level_in_force_and_each_precisions_kernel():
    lv = levels()
    assert lv[0] == "avx2" and len(set(lv)) == len(lv)
    out = subprocess.run([BIN, "cpu"], capture_output=True, text=True, check=True,
                         env=env_at("AVX2")).stdout
    assert re.search(r"^isa: avx2 \(ONEDNN_MAX_CPU_ISA=AVX2\)$", out, re.M), out
    assert re.search(r"^  int8 +avx2_signc$", out, re.M), out
    assert re.search(r"^  int8g +avx2_signc$", out, re.M), out
    assert re.search(r"^  tf32 +- \(not on the CPU\)$", out, re.M), out
    top = subprocess.run([BIN, "cpu"], capture_output=True, text=True, check=True).stdout
    assert ("isa: %s\n" % lv[-1]) in top, top


ROW = re.compile(r"^(\w+) +([0-9.]+) +([0-9.]+)x +([0-9.]+) +([0-9.]+)x +([0-9.]+) +([0-9.]+) "
                 r"+([0-9.]+)$", re.M)


@pytest.mark.parametrize("level", [None, "AVX2"])
def test_mantissa_cpu_measure_gives_each_precisions_speed_memory_and_drift(level):
    """Figures, not their values (the machine is shared): a row per precision
    the CPU runs, FP32's own ratios 1 and cosines 1, the others' memory below
    FP32's and drift within the load check's bounds; a warning line names the
    ISA wherever a precision is slower than fp32 at both batch sizes."""
    env = env_at(level) if level else None
    out = subprocess.run([BIN, "cpu", "--measure", "--model", MODEL, "--seconds", "0.05"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    rows = {m[0]: m[1:] for m in ROW.findall(out.stdout)}
    assert set(rows) == {"fp32", "fp16", "bf16", "int8", "fp8", "int8g"}, out.stdout
    f = [float(x) for x in rows["fp32"]]
    assert f[1] == 1.0 and f[3] == 1.0 and f[5] == 1.0 and f[6] == 1.0, out.stdout
    for p, r in rows.items():
        v = [float(x) for x in r]
        assert v[0] > 0 and v[2] > 0, (p, out.stdout)
        if p != "fp32":
            assert v[4] < f[4] and v[5] > 0.99 and v[6] > 0.98, (p, out.stdout)
            warned = re.search(r"^warning: %s is slower than fp32 on this CPU at ISA \S+ "
                               % p, out.stdout, re.M)
            if v[1] < 1.0 and v[3] < 1.0:  # (the ratios print rounded: 1.00 may be either)
                assert warned, (p, out.stdout)
            elif v[1] > 1.0 or v[3] > 1.0:
                assert not warned, (p, out.stdout)


def test_mantissa_cpu_measure_names_a_folder_it_cannot_load(tmp_path):
    out = subprocess.run([BIN, "cpu", "--measure", "--model", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and str(tmp_path / "nope") in out.stderr, out.stderr


def test_each_build_names_its_isa_and_kernel_and_passes_the_load_check(tmp_path):
    cfg = server_cfg([model_cfg([dict(name="f", precision="fp32", traffic=50),
                                 dict(name="q", precision="int8", traffic=50)])])
    srv = Server(cfg, tmp_path, env=env_at("AVX2"))
    try:
        loaded = {e["variant"]: e for e in srv.events("loaded")}
        q = loaded["q"]
        assert (q["model"], q["precision"], q["device"], q["isa"], q["kernel"]) == \
            ("minilm", "int8", "cpu", "avx2", "avx2_signc"), q
        assert q["check_probes"] > 0 and 0.99 < q["check_mean_cos"] < 1, q
        # FP32 builds have nothing to check
        f = loaded["f"]
        assert (f["precision"], f["device"], f["isa"], f["kernel"]) == \
            ("fp32", "cpu", "avx2", "onednn_f32"), f
        assert "check_probes" not in f and "check_mean_cos" not in f, f
        m = metrics(srv)
        key = ('mantissa_variant_kernel_info{model="minilm",variant="q",precision="int8",'
               'device="cpu",isa="avx2",kernel="avx2_signc"}')
        assert m.get(key) == 1, [k for k in m if "kernel_info" in k]
        mean = m['mantissa_load_check_cosine{model="minilm",variant="q",stat="mean"}']
        least = m['mantissa_load_check_cosine{model="minilm",variant="q",stat="min"}']
        assert 0.9985 <= mean <= 1 and 0.996 <= least <= mean
        assert not any(k.startswith('mantissa_load_check_cosine{model="minilm",variant="f"')
                       for k in m)
    finally:
        assert srv.stop() == 0


def test_a_wrong_int8_kernel_is_refused_at_start(tmp_path):
    cfg = server_cfg([model_cfg([dict(name="q", precision="int8", traffic=100)])])
    path = tmp_path / "mantissa.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300,
                       env=env_at("AVX2", MANTISSA_INT8_KERNEL="onednn"))
    assert p.returncode != 0
    msg = p.stderr
    assert "variant q: refused by the load check" in msg, msg
    assert "(int8 needs 0.9985)" in msg and "ISA avx2 with kernel onednn" in msg, msg
    assert "serving on" not in msg


def test_a_wrong_int8_kernel_on_reload_fails_that_variant_and_the_old_build_serves(tmp_path):
    base = [dict(name="a", precision="fp32", traffic=50)]
    srv = Server(server_cfg([model_cfg(base)]), tmp_path,
                 env=env_at("AVX2", MANTISSA_INT8_KERNEL="onednn"))
    try:
        write_config(srv, server_cfg([model_cfg(base + [dict(name="b", precision="int8",
                                                             traffic=50)])]))
        wait_until(lambda: variants_of(srv).get("b", {}).get("state") == "failed", "b failed")
        b = variants_of(srv)["b"]
        assert "refused by the load check" in b["error"] and b["serving"] is None, b
        assert "kernel onednn" in b["error"]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        for i in range(20):
            st, r, _, _ = embed(conn, "text %d" % i)
            assert st == 200 and r.getheader("X-Mantissa-Variant") == "a"
        st, _, _, body = embed(conn, "pinned", model="minilm@b")
        assert st == 503 and b"load check" in body
        conn.close()
        m = metrics(srv)
        assert m['mantissa_variant_build_failures_total{model="minilm",variant="b"}'] == 1
    finally:
        assert srv.stop() == 0
