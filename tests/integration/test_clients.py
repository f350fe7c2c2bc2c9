"""Compatibility with real clients, unchanged: NVIDIA's tritonclient (HTTP)
and perf_analyzer, and the OpenAI Python SDK, all pointed at the real
binary. They are installed by make deps (tools/requirements.txt); a test
skips with a clear reason when its client is missing."""
import json
import os
import subprocess

import pytest

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

SENTENCES = ["A man is playing a guitar.", "A dog runs across the field.",
             "Ünïcödé and 中文 mixed in"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cfg = default_config()
    cfg["models"][0]["batching"] = {"max_batch_size": 32, "max_queue_delay_us": 1000}
    srv = Server(cfg, tmp_path_factory.mktemp("clients"))
    yield srv
    assert srv.stop() == 0, "".join(srv.log)


def reference_vectors(server):
    _, data = server.request("POST", "/v1/embeddings", {"model": "minilm", "input": SENTENCES})
    return [d["embedding"] for d in data["data"]]


def test_tritonclient_metadata_config_and_stats(server):
    h = pytest.importorskip("tritonclient.http")
    c = h.InferenceServerClient("127.0.0.1:%d" % server.port)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("minilm")
    meta = c.get_server_metadata()
    assert meta["name"] == "mantissa" and "binary_tensor_data" in meta["extensions"]
    m = c.get_model_metadata("minilm")
    assert m["inputs"][0]["datatype"] == "BYTES" and m["outputs"][0]["datatype"] == "FP32"
    cfg = c.get_model_config("minilm")
    assert cfg["name"] == "minilm" and cfg["output"][0]["data_type"] == "TYPE_FP32"
    st = c.get_inference_statistics("minilm")
    assert st["model_stats"][0]["name"] == "minilm"
    idx = c.get_model_repository_index()
    assert idx[0]["name"] == "minilm" and idx[0]["state"] == "READY"


@pytest.mark.parametrize("binary_in,binary_out", [(True, True), (False, False), (True, False),
                                                  (False, None)])
def test_tritonclient_infer(server, binary_in, binary_out):
    h = pytest.importorskip("tritonclient.http")
    np = pytest.importorskip("numpy")
    c = h.InferenceServerClient("127.0.0.1:%d" % server.port)
    inp = h.InferInput("text", [len(SENTENCES)], "BYTES")
    inp.set_data_from_numpy(np.array([s.encode() for s in SENTENCES], dtype=np.object_),
                            binary_data=binary_in)
    # binary_out None: no outputs named, so the client asks for binary_data_output
    outputs = None if binary_out is None else [h.InferRequestedOutput("embedding",
                                                                      binary_data=binary_out)]
    r = c.infer("minilm", [inp], outputs=outputs, request_id="triton-1")
    assert r.get_response()["id"] == "triton-1"
    e = r.as_numpy("embedding")
    assert e.shape == (len(SENTENCES), 384) and e.dtype == np.float32
    ref = np.array(reference_vectors(server), dtype=np.float32)
    assert np.abs(e - ref).max() < 1e-5


def test_tritonclient_error_is_raised_with_the_server_message(server):
    h = pytest.importorskip("tritonclient.http")
    utils = pytest.importorskip("tritonclient.utils")
    np = pytest.importorskip("numpy")
    c = h.InferenceServerClient("127.0.0.1:%d" % server.port)
    inp = h.InferInput("txt", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    with pytest.raises(utils.InferenceServerException) as e:
        c.infer("minilm", [inp])
    assert "txt" in str(e.value)


def test_tritonclient_unload_load_and_a_refused_config_override(tmp_path):
    """The repository calls as tritonclient makes them: unload (it sends
    unload_dependents), load, and load with a config override, which the
    server refuses (settings come from the config file only)."""
    h = pytest.importorskip("tritonclient.http")
    utils = pytest.importorskip("tritonclient.utils")
    srv = Server(default_config(), tmp_path)
    try:
        c = h.InferenceServerClient("127.0.0.1:%d" % srv.port)
        c.unload_model("minilm")
        assert not c.is_model_ready("minilm")
        c.load_model("minilm")
        assert c.is_model_ready("minilm")
        with pytest.raises(utils.InferenceServerException) as e:
            c.load_model("minilm", config=json.dumps({"max_batch_size": 8}))
        assert "config" in str(e.value)
        assert c.is_model_ready("minilm")
    finally:
        assert srv.stop() == 0, "".join(srv.log)


def perf_analyzer_cmd():
    """perf_analyzer from the tritonclient wheel in the venv, with the CUDA
    runtime library it links (from the nvidia-cuda-runtime-cu12 wheel)."""
    import sys
    exe = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    if not os.path.exists(exe):
        return None, None
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime as cr
        lib = os.path.join(list(cr.__path__)[0], "lib")
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    except ImportError:
        pass
    return exe, env


@pytest.mark.parametrize("binary", [True, False])
def test_perf_analyzer_completes_a_run(server, tmp_path, binary):
    exe, env = perf_analyzer_cmd()
    if not exe:
        pytest.skip("perf_analyzer not installed (tritonclient wheel; make deps)")
    data = tmp_path / "input.json"
    data.write_text(json.dumps({"data": [{"text": {"content": [s], "shape": [1]}}
                                         for s in SENTENCES]}))
    cmd = [exe, "-m", "minilm", "-u", "127.0.0.1:%d" % server.port, "-i", "http",
           "--input-data", str(data), "--concurrency-range", "2",
           "--measurement-mode", "count_windows", "--measurement-request-count", "20",
           "--max-trials", "3", "--stability-percentage", "999"]
    if not binary:
        cmd += ["--input-tensor-format", "json", "--output-tensor-format", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Throughput:" in r.stdout and "infer/sec" in r.stdout, r.stdout


def test_openai_sdk_embeddings_create(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port, api_key="unused",
                           max_retries=0)
    ref = reference_vectors(server)
    # the SDK asks for base64 by default and decodes it
    r = client.embeddings.create(model="minilm", input=SENTENCES)
    assert [d.index for d in r.data] == [0, 1, 2]
    for d, want in zip(r.data, ref):
        assert len(d.embedding) == 384
        assert max(abs(a - b) for a, b in zip(d.embedding, want)) < 1e-6
    assert r.usage.prompt_tokens == r.usage.total_tokens > 0
    r = client.embeddings.create(model="minilm@fp32", input="one", encoding_format="float")
    assert len(r.data[0].embedding) == 384
    models = [m.id for m in client.models.list()]
    assert "minilm" in models
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="x")
