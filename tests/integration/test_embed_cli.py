"""`mantissa embed` and blank lines: a blank line of stdin (or "" with
--jsonl) is refused, naming its line, so that output line i is always the
vector of input line i; --skip-blank skips them instead. The real binary
on real stdin."""
import json
import os
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


def run_embed(tmp_path, stdin, *args):
    cfg = tmp_path / "embed.json"
    cfg.write_text(json.dumps(default_config()))
    return subprocess.run([BIN, "embed", "--config", str(cfg)] + list(args), input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_embed_refuses_a_blank_line_naming_it(tmp_path):
    r = run_embed(tmp_path, "a\nb\n\n")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "line 3" in r.stderr and "blank" in r.stderr and "--skip-blank" in r.stderr, r.stderr
    assert len(r.stdout.splitlines()) == 2
    r = run_embed(tmp_path, "a\n  \t\r\nb\n")
    assert r.returncode == 1 and "line 2" in r.stderr, r.stderr
    r = run_embed(tmp_path, '"a"\n""\n', "--jsonl")
    assert r.returncode == 1 and "line 2" in r.stderr, r.stderr


def test_embed_skip_blank_skips_them(tmp_path):
    r = run_embed(tmp_path, "a\n\nb\n   \n", "--skip-blank")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(len(json.loads(l)) == 384 for l in lines)
