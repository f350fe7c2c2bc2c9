"""Integration tests of models[].variants[].measure: what each precision buys
on this machine, timed when its build is made (engine/speed.c, the timing of
`mantissa cpu --measure`): the `loaded` line's speed fields, /metrics'
gauges, FP32's figures from the served FP32 variant or from a transient FP32
build, a reload re-measuring a rebuilt variant and dropping a removed one's
gauges, the warning of a precision slower than FP32 at both batch sizes
(shown by forcing a slow kernel: fp16 weights decoded into sgemm,
MANTISSA_NO_H16_KERNEL=1), and a bad value refused naming the field.

The machine is shared: no test asserts a speed. Figures must be there,
finite and positive; a warning must be there exactly when the figures the
line gives say slower at both batch sizes."""
import json
import math
import os
import re
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT, Server
from test_hotswitch import metrics, model_cfg, server_cfg, variants_of, wait_until, write_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

SPEED_FIELDS = ("speed_b1_texts_per_s", "speed_b32_texts_per_s", "speed_b1_vs_fp32",
                "speed_b32_vs_fp32", "measure_s")


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def gauges(m, variant):
    """The measure gauges of variant: {(name, batch): value}."""
    out = {}
    for k, v in m.items():
        g = re.match(r'mantissa_variant_speed_(vs_fp32|texts_per_second)\{model="minilm",'
                     r'variant="%s",batch="(\d+)"\}$' % re.escape(variant), k)
        if g:
            out[(g.group(1), g.group(2))] = v
    return out


def check_warning(srv, line):
    """A "slower than fp32" line for line's variant exactly when its figures
    say slower at both batch sizes (they are logged rounded: 1.00 may be
    either); when there is one, it names the ISA and what the precision buys."""
    warned = [e for e in srv.events("slower than fp32") if e["variant"] == line["variant"]]
    r1, r32 = line["speed_b1_vs_fp32"], line["speed_b32_vs_fp32"]
    if r1 < 1.0 and r32 < 1.0:
        assert len(warned) == 1, (line, warned)
        w = warned[0]
        assert (w["precision"], w["isa"]) == (line["precision"], line["isa"]), w
        assert (w["speed_b1_vs_fp32"], w["speed_b32_vs_fp32"]) == (r1, r32), w
        assert w["warning"].startswith("%s is slower than fp32 on this CPU at ISA %s ("
                                       % (line["precision"], line["isa"])), w
        assert "what it buys here is memory: %.1f MiB against fp32's %.1f" % (
            w["resident_mib"], w["fp32_resident_mib"]) in w["warning"], w
        assert w["resident_mib"] == line["resident_mib"] < w["fp32_resident_mib"], w
    elif r1 > 1.0 or r32 > 1.0:
        assert not warned, (line, warned)
    return warned


def test_measured_variants_give_their_speed_in_the_log_and_metrics_and_a_reload_remeasures(
        tmp_path):
    f = dict(name="f", precision="fp32", traffic=50, measure=True)
    q = dict(name="q", precision="int8", traffic=50, measure=True)
    srv = Server(server_cfg([model_cfg([q, f])]), tmp_path)
    try:
        loaded = {e["variant"]: e for e in srv.events("loaded")}
        for name in ("f", "q"):
            assert all(positive(loaded[name].get(k)) for k in SPEED_FIELDS), loaded[name]
        # FP32's figures are the served FP32 variant's: its own ratios are 1
        assert loaded["f"]["speed_b1_vs_fp32"] == loaded["f"]["speed_b32_vs_fp32"] == 1.0
        assert not any("made to time variant" in line for line in srv.log), srv.log
        check_warning(srv, loaded["q"])
        m = metrics(srv)
        for name in ("f", "q"):
            g = gauges(m, name)
            assert set(g) == {(k, b) for k in ("vs_fp32", "texts_per_second")
                              for b in ("1", "32")}, g
            assert all(positive(v) for v in g.values()), g
        assert gauges(m, "f")[("vs_fp32", "1")] == gauges(m, "f")[("vs_fp32", "32")] == 1.0
        assert abs(gauges(m, "q")[("vs_fp32", "32")] - loaded["q"]["speed_b32_vs_fp32"]) < 0.01
        assert "# TYPE mantissa_variant_speed_vs_fp32 gauge" in \
            srv.request("GET", "/metrics", raw=True)[1].decode()
        view = variants_of(srv)["q"]
        assert view["measure"] is True and view["serving"]["speed"]["batch"] == [1, 32], view
        assert view["serving"]["speed"]["vs_fp32"] == pytest.approx(
            [gauges(m, "q")[("vs_fp32", b)] for b in ("1", "32")], rel=1e-5), view

        # q goes, r (int8, measured) comes, f is rebuilt without measure
        r = dict(q, name="r", calibration="percentile", percentile=99.99)
        write_config(srv, server_cfg([model_cfg([dict(f, measure=False), r])]))
        wait_until(lambda: variants_of(srv).get("r", {}).get("state") == "ready" and
                   "q" not in variants_of(srv) and not gauges(metrics(srv), "f"), "r serving")
        line = wait_until(lambda: [x for x in srv.log if "variant minilm@r now serves" in x],
                          "r's line")[0]
        assert re.search(r"; measured: [0-9.]+ texts/s at batch 1 \([0-9.]+x fp32\), [0-9.]+ "
                         r"at batch 32 \([0-9.]+x\)", line), line
        m = metrics(srv)
        assert not gauges(m, "q") and not gauges(m, "f"), m
        assert variants_of(srv)["f"]["serving"]["speed"] is None
        assert all(positive(v) for v in gauges(m, "r").values()) and len(gauges(m, "r")) == 4
    finally:
        assert srv.stop() == 0


def test_without_an_fp32_variant_a_transient_build_times_fp32_and_a_slow_kernel_warns(
        tmp_path):
    """fp16 weights decoded into sgemm on every forward (the kernel forced off)
    are slower than FP32 here at both batch sizes, unless the machine's noise
    says otherwise: the warning is checked against the figures logged."""
    h = dict(name="h", precision="fp16", traffic=100, measure=True)
    env = dict(os.environ, MANTISSA_NO_H16_KERNEL="1")
    srv = Server(server_cfg([model_cfg([h])]), tmp_path, env=env)
    try:
        made = [x for x in srv.log if "made to time variant h against, and freed" in x]
        assert len(made) == 1, srv.log
        line = srv.events("loaded")[0]
        assert all(positive(line.get(k)) for k in SPEED_FIELDS), line
        warned = check_warning(srv, line)
        m = metrics(srv)
        assert all(positive(v) for v in gauges(m, "h").values()) and len(gauges(m, "h")) == 4
        print("fp16 without its kernel against fp32: %.2fx at batch 1, %.2fx at batch 32; "
              "warning: %s" % (line["speed_b1_vs_fp32"], line["speed_b32_vs_fp32"],
                               warned[0]["warning"] if warned else "none"))
    finally:
        assert srv.stop() == 0


def test_measure_must_be_a_boolean(tmp_path):
    cfg = server_cfg([model_cfg([dict(name="q", precision="int8", measure="yes")])])
    path = tmp_path / "mantissa.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode != 0
    assert "%s: models[0].variants[0].measure: must be true or false" % path in p.stderr, \
        p.stderr
