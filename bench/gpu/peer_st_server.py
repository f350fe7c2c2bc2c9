#!/usr/bin/env python3
"""peer_st_server.py: sentence-transformers behind HTTP, the peer server of
`mantissa serve` in bench/gpu.sh's serve_peers phase (issue 24, item 5) and
of bench/gpu/serve_peers.py wherever it runs.

  python3 bench/gpu/peer_st_server.py --model DIR [--port 8090] [--device cuda]
          [--dtype fp16] [--max-batch 64]

POST /v1/embeddings with {"model": ..., "input": "text" | ["text", ...]}
answers as OpenAI's embeddings route does ({"object": "list", "data":
[{"object": "embedding", "index": i, "embedding": [...]}], ...}), with the
model's own pipeline (modules.json: transformer, mean pooling, L2
normalisation) in --dtype on --device. GET /health answers 200 once the model
is loaded and warmed.

Requests are batched as the usual embedding servers batch them (TEI,
infinity): one worker thread takes every text queued at the moment it is
free, up to --max-batch, and runs one encode over them; the HTTP threads
(one per connection, keep-alive) only parse, queue and answer. The GPU
machine has torch and sentence-transformers but none of the web stacks those
servers use, so this is the standard library's threading HTTP server; its
Python-side cost per request (parse, JSON of 384 floats) is part of what a
Python embedding server pays.
"""
import argparse
import json
import os
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20


class Job:
    __slots__ = ("texts", "done", "vectors", "error")

    def __init__(self, texts):
        self.texts, self.done, self.vectors, self.error = texts, threading.Event(), None, None


def worker(model, jobs, max_batch, torch):
    """Takes what is queued (up to max_batch texts), encodes it as one batch."""
    while True:
        batch = [jobs.get()]
        n = len(batch[0].texts)
        while n < max_batch:
            try:
                j = jobs.get_nowait()
            except queue.Empty:
                break
            batch.append(j)
            n += len(j.texts)
        texts = [t for j in batch for t in j.texts]
        try:
            with torch.inference_mode():
                emb = model.encode(texts, batch_size=len(texts), convert_to_tensor=True,
                                   normalize_embeddings=True, show_progress_bar=False)
            rows = emb.float().cpu().tolist()
            at = 0
            for j in batch:
                j.vectors, at = rows[at:at + len(j.texts)], at + len(j.texts)
        except Exception as e:  # noqa: BLE001 - every job of the batch gets the error
            for j in batch:
                j.error = "%s: %s" % (type(e).__name__, e)
        for j in batch:
            j.done.set()


def make_handler(jobs, name, max_inputs):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the load generator expects
        # headers and body go out as two writes: with Nagle's algorithm the
        # body waits for the client's delayed ACK (40 ms a request)
        disable_nagle_algorithm = True

        def log_message(self, *args):  # one line per request would cost more than the work
            pass

        def answer(self, code, obj):
            body = json.dumps(obj, separators=(",", ":")).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, code, msg):
            self.answer(code, {"error": {"message": msg, "type": "invalid_request_error"}})

        def do_GET(self):
            if self.path == "/health":
                self.answer(200, {"status": "ok"})
            else:
                self.error(404, "no route %s" % self.path)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY:
                return self.error(400 if length <= 0 else 413, "body: need 1..%d bytes" % MAX_BODY)
            raw = self.rfile.read(length)
            if self.path != "/v1/embeddings":
                return self.error(404, "no route %s" % self.path)
            try:
                req = json.loads(raw)
                inp = req["input"]
            except (ValueError, KeyError, TypeError):
                return self.error(400, "body: a JSON object with \"input\" is required")
            texts = [inp] if isinstance(inp, str) else inp
            if (not isinstance(texts, list) or not texts or len(texts) > max_inputs or
                    not all(isinstance(t, str) for t in texts)):
                return self.error(400, "input: a string or 1..%d strings" % max_inputs)
            job = Job(texts)
            jobs.put(job)
            job.done.wait()
            if job.error:
                return self.answer(500, {"error": {"message": job.error, "type": "server_error"}})
            self.answer(200, {"object": "list", "model": name,
                              "data": [{"object": "embedding", "index": i, "embedding": v}
                                       for i, v in enumerate(job.vectors)],
                              "usage": {"prompt_tokens": 0, "total_tokens": 0}})
    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the listen backlog: 64 clients connect at once


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a sentence-transformers model folder")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16")
    ap.add_argument("--max-batch", type=int, default=64, help="texts per encode at most")
    ap.add_argument("--max-inputs", type=int, default=64, help="texts per request at most")
    ap.add_argument("--name", default="minilm", help="the model name answers carry")
    a = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder; the GPU machine has no network
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(a.model, device=a.device)
    if a.dtype == "fp16":
        model.half()
    elif a.dtype == "bf16":
        model.to(torch.bfloat16)
    model.eval()
    with torch.inference_mode():  # warm-up: kernels loaded, allocator primed
        for n in (1, a.max_batch):
            model.encode(["warm up the peer"] * n, batch_size=n, show_progress_bar=False)
    jobs = queue.Queue()
    threading.Thread(target=worker, args=(model, jobs, a.max_batch, torch), daemon=True).start()
    srv = Server((a.host, a.port), make_handler(jobs, a.name, a.max_inputs))
    print("peer_st_server: sentence-transformers %s on %s, %s, batches of up to %d, :%d" %
          (getattr(sys.modules.get("sentence_transformers"), "__version__", "?"), a.device,
           a.dtype, a.max_batch, a.port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
