"""Integration tests: the CUDA backend as a module (engine/cuda/dl.c).

A CUDA build's binary opens libmantissa_cuda.so, and with it cuBLASLt and
the CUDA runtime, only where a CUDA driver opens. These run the real binary
on this machine: without a driver nothing CUDA is mapped and the start-up
line says why; with a stand-in driver (MANTISSA_CUDA_DRIVER) the real module
loads, its references to the engine resolve against the binary, and the
CUDA runtime itself reports no device; a missing module is named. Every
case serves on the CPU."""
import ctypes
import os

import pytest

from conftest import BIN, Server, default_config

MODULE = os.path.join(os.path.dirname(os.path.abspath(BIN)), "libmantissa_cuda.so")


def driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


pytestmark = [
    pytest.mark.skipif(not os.path.exists(MODULE),
                       reason="this build has no CUDA module (CUDA=0 or no nvcc)"),
    pytest.mark.skipif(driver_present(), reason="a CUDA driver is present here"),
]


def serve(tmp_path, **env):
    e = dict(os.environ)
    for k in ("MANTISSA_CUDA_DRIVER", "MANTISSA_CUDA_MODULE"):
        e.pop(k, None)
    e.update(env)
    return Server(default_config(), tmp_path, env=e)


def mapped(srv):
    with open("/proc/%d/maps" % srv.proc.pid) as f:
        return f.read()


def serves_on_the_cpu(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "a cat"})
    assert resp.status == 200 and len(data["data"][0]["embedding"]) == 384, data


def cuda_line(srv):
    """Why the start-up log says there is no CUDA device."""
    lines = [e for e in srv.events("no device") if e["backend"] == "cuda"]
    assert len(lines) == 1, srv.log
    return lines[0]["why"]


def test_without_a_driver_no_cuda_library_is_loaded(tmp_path):
    srv = serve(tmp_path)
    try:
        assert "no CUDA driver" in cuda_line(srv) and "libcuda.so.1" in cuda_line(srv)
        maps = mapped(srv)
        for lib in ("libmantissa_cuda", "libcublasLt", "libcudart"):
            assert lib not in maps, lib
        serves_on_the_cpu(srv)
    finally:
        assert srv.stop() == 0


def test_with_a_driver_the_module_loads_and_the_runtime_answers(tmp_path):
    # libc stands in for the driver: the probe passes, the real module and
    # the CUDA runtime load, and the runtime finds no usable driver
    srv = serve(tmp_path, MANTISSA_CUDA_DRIVER="libc.so.6")
    try:
        line = cuda_line(srv)
        assert "no CUDA driver" not in line and "CUDA module" not in line, line
        maps = mapped(srv)
        assert "libmantissa_cuda.so" in maps and "libcudart" in maps
        serves_on_the_cpu(srv)
    finally:
        assert srv.stop() == 0


def test_a_missing_module_is_named(tmp_path):
    gone = str(tmp_path / "nowhere" / "libmantissa_cuda.so")
    srv = serve(tmp_path, MANTISSA_CUDA_DRIVER="libc.so.6", MANTISSA_CUDA_MODULE=gone)
    try:
        line = cuda_line(srv)
        assert "cannot load the CUDA module" in line and gone in line, line
        assert "libcublasLt" not in mapped(srv)
        serves_on_the_cpu(srv)
    finally:
        assert srv.stop() == 0
