"""One loop on the request path (issue 25): libmicrohttpd is driven by the
scheduler's libuv loop, so HTTP has no threads of its own, the loop keeps
serving while an engine worker runs a long batch, and an answer that a
handler's work ends at once (inside the handler's own call) still goes out.

No timing thresholds: the long-batch test checks an order of events (a
probe answered while the forward of a big request was running, by that
request's own Server-Timing), not a duration."""
import json
import os
import re
import threading
import time

import pytest

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


@pytest.fixture
def srv(tmp_path):
    s = Server(default_config(), tmp_path)
    yield s
    if s.proc.poll() is None:
        assert s.stop() == 0, "".join(s.log)


def thread_names(pid):
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
            out[int(t)] = f.read().strip()
    return out


def test_http_has_no_threads_of_its_own(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": ["warm up"]})
    assert resp.status == 200, data
    names = thread_names(srv.proc.pid)
    # libmicrohttpd names its threads MHD-listen, MHD-worker, MHD-single ...
    assert not [n for n in names.values() if n.startswith("MHD")], names
    # and the process still answers many connections at once, on the loop
    results = {}

    def one(i):
        results[i] = srv.request("POST", "/v1/embeddings",
                                 {"model": "minilm", "input": ["text %d" % i]})

    ts = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(r[0].status for r in results.values()) == [200] * 24


def test_the_loop_answers_probes_while_a_worker_runs_a_long_batch(srv):
    # a forward of 64 long texts: long enough to probe many times meanwhile
    body = {"model": "minilm", "input": [("sentence %d about the weather and the sea " % i) * 12
                                         for i in range(64)]}
    done = {}
    probes = []  # (when answered, status)
    stop = threading.Event()

    def big():
        done["t0"] = time.monotonic()
        done["resp"] = srv.request("POST", "/v1/embeddings", body)
        done["t1"] = time.monotonic()

    def probe():
        while not stop.is_set():
            resp, _ = srv.request("GET", "/v2/health/ready")
            probes.append((time.monotonic(), resp.status))

    tb = threading.Thread(target=big)
    tp = threading.Thread(target=probe)
    tp.start()
    tb.start()
    tb.join()
    stop.set()
    tp.join()
    resp, data = done["resp"]
    assert resp.status == 200, data
    assert len(data["data"]) == 64
    hops = dict((m.group(1), float(m.group(2))) for m in
                re.finditer(r"(\w+);dur=([\d.]+)", resp.getheader("Server-Timing")))
    # the forward on the client's clock: it ended `resume` ms, plus the
    # answer's way back over loopback, before t1, and began `forward` ms
    # before its end; the middle half of it is inside the forward whatever
    # that way back took, as long as it took less than a quarter of it
    fwd = hops["forward"] / 1e3
    end = done["t1"] - hops["resume"] / 1e3
    lo, hi = end - 0.75 * fwd, end - 0.25 * fwd
    during = [st for t, st in probes if lo < t < hi]
    assert during and set(during) == {200}, (hops, len(probes), lo - done["t0"], hi - done["t0"])


def test_an_answer_ended_inside_its_own_handler_still_goes_out(srv):
    # a control job that ends as soon as it is submitted (on the loop, inside
    # the handler that suspended the connection): it must be resumed after
    # libmicrohttpd's call returns, or the client waits forever
    resp, data = srv.request("POST", "/v2/repository/models/nope/unload", b"")
    assert resp.status == 404, data
    resp, data = srv.request("POST", "/v2/repository/models/minilm/load", b"")
    assert resp.status == 200, data
    # and on one keep-alive connection, again and again
    for _ in range(5):
        resp, data = srv.request("POST", "/v2/repository/models/nope/unload", b"")
        assert resp.status == 404, data
