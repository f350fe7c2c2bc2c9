#!/usr/bin/env python3
"""multi_replica.py: the issue's loopback deployment test (make test-deploy):
3 real Mantissa replicas behind real nginx (deploy/nginx/nginx.conf, ports
rewritten; or HAProxy, deploy/haproxy/haproxy.cfg, with the argument haproxy), a steady load of OpenAI and KServe requests through nginx, and
while it runs:

  1. each replica in turn gets SIGTERM while a request sent straight to it
     is in flight; it must turn unready (/v2/health/ready 503) while it
     drains, answer that request with 200, exit 0 within its grace period,
     and is then started again on the same port;
  2. every replica's config file is edited, twice: its variant "a" switched
     in place from fp32 to another precision (int8 when this build has it;
     GET /v2/models/minilm must show it ready), then a new variant "b"
     replacing "a" (X-Mantissa-Variant: b); each within 30 s, no restart.

Passes only if every request of the load was answered 200 (zero failed
requests, connection errors included) and every step above held.
Bounded: at most about 3 minutes; ends everything it started.

  python3 tests/deploy/multi_replica.py [nginx|haproxy] [--image IMAGE]
  (MANTISSA_BIN or BUILD pick the binary; with --image the replicas are
  containers of IMAGE instead (deploylib.Container): the config edits are
  ConfigMap-style swaps of a mounted folder, and it also checks that the
  image's HEALTHCHECK turns healthy, that the server runs as uid 10001 and
  that its root filesystem is read-only)
Ends with "multi_replica: N passed, N failed".
"""
import collections
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

REPLICAS = 3
LOAD_THREADS = 4
MAX_RUN_S = 150            # the load stops by itself after this, whatever happens
SHUTDOWN_GRACE_MS = 10000
DRAIN_DELAY_MS = 1000      # unready but still admitting, so balancers can notice
SWITCH_WAIT_S = 30
VARIANT = "a"              # the replicas' one variant, fp32 at first


class Load:
    """LOAD_THREADS clients sending requests through the balancer until
    stopped (or MAX_RUN_S), each on a keep-alive connection, alternating the
    OpenAI and the KServe endpoint. Counts every outcome."""

    def __init__(self, port):
        self.port, self.stop = port, threading.Event()
        self.lock = threading.Lock()
        self.outcomes = collections.Counter()
        self.variants = collections.Counter()
        self.failures = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(LOAD_THREADS)]
        self.deadline = time.time() + MAX_RUN_S

    def one(self, conn, k):
        if k % 2:
            body = {"model": "minilm", "input": ["load %d: a man is playing a guitar" % k]}
            path = "/v1/embeddings"
        else:
            body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                "data": ["load %d: a woman is slicing an onion" % k]}]}
            path = "/v2/models/minilm/infer"
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("X-Mantissa-Variant")

    def run(self, i):
        conn, k = None, 0
        while not self.stop.is_set() and time.time() < self.deadline:
            k += 1
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                st, var = self.one(conn, k)
            except (OSError, http.client.HTTPException) as e:
                st, var = "conn-error", None
                conn.close()
                conn = None
                err = repr(e)
            with self.lock:
                self.outcomes[st] += 1
                if st == 200:
                    self.variants[var] += 1
                elif len(self.failures) < 20:
                    self.failures.append((time.strftime("%H:%M:%S"), st,
                                          err if st == "conn-error" else ""))
        if conn:
            conn.close()

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=40)


def in_flight_request(port, result):
    """A request straight to one replica, big enough to be in flight when
    SIGTERM arrives (32 texts of about 200 tokens)."""
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 22)
    result["status"], _, result["body"] = d.request(
        port, "POST", "/v1/embeddings", {"model": "minilm", "input": [text] * 32}, timeout=60)


def sigterm_one(c, procs, r):
    """SIGTERM replica r under load with a request in flight; checks the drain."""
    res = {}
    t = threading.Thread(target=in_flight_request, args=(r.port, res))
    t.start()
    time.sleep(0.15)
    t0 = time.time()
    r.send_signal(signal.SIGTERM)
    unready = False
    while r.poll() is None and time.time() - t0 < 5:
        st, _, _ = d.request(r.port, timeout=1)
        if st == 503:
            unready = True
            break
        if st is None:
            break
        time.sleep(0.05)
    try:
        rc = r.wait(timeout=SHUTDOWN_GRACE_MS / 1000 + 10)
    except Exception:
        rc = "still running after %ds" % (SHUTDOWN_GRACE_MS / 1000 + 10)
        r.kill()
        r.wait(timeout=10)
    took = time.time() - t0
    t.join(timeout=60)
    c.check("%s: /v2/health/ready turned 503 after SIGTERM, before it stopped" % r.name,
            unready, "never saw 503 (it stopped at once, or stayed ready)")
    c.check("%s: the request in flight at SIGTERM was answered 200" % r.name,
            res.get("status") == 200, "status %s: %s" % (res.get("status"),
                                                         (res.get("body") or b"")[:120]))
    c.check("%s: exited 0 after SIGTERM (%.1fs)" % (r.name, took), rc == 0,
            "exit %s; log: %s" % (rc, procs.log_tail(r, 5)))


def container_checks(c, r, when):
    """The image's own promises, on a running container replica."""
    t0, health = time.time(), ""
    while time.time() - t0 < 60:
        health = r.health()
        if health == "healthy":
            break
        time.sleep(0.5)
    c.check("%s: HEALTHCHECK healthy %s (after %.0fs)" % (r.name, when, time.time() - t0),
            health == "healthy", "health: %s" % health)
    uid = d.docker("exec", r.name, "id", "-u", check=False)
    c.check("%s: the server runs as uid %s" % (r.name, d.IMAGE_UID), uid == d.IMAGE_UID,
            "id -u: %s" % uid)
    rr = subprocess.run([d.DOCKER, "exec", r.name, "sh", "-c", "touch /opt/mantissa/probe"],
                        capture_output=True, text=True, timeout=30)
    c.check("%s: the root filesystem is read-only" % r.name,
            rr.returncode != 0 and "Read-only file system" in rr.stderr,
            "touch: exit %d %s" % (rr.returncode, rr.stderr.strip()))


WD = None
LB = "nginx"


def main():
    global WD
    wd = WD = d.workdir("mantissa-multi-")
    procs = d.Procs(wd)
    c = d.Checks("multi_replica")
    load = None
    try:
        new_prec = "int8" if d.supports_precision("int8", wd) else "fp16"
        print("multi_replica: %s; work folder %s; %s; edit 1 switches fp32 -> %s"
              % (LB, wd, "image " + d.IMAGE if d.IMAGE else "binary " + d.mantissa_bin(),
                 new_prec), flush=True)
        server = {"engine_threads": 1, "shutdown_grace_ms": SHUTDOWN_GRACE_MS,
                  "drain_delay_ms": DRAIN_DELAY_MS}
        cfg = d.replica_config(VARIANT, "fp32", server)
        if not d.accepts_config(cfg, wd, "drain"):
            # A binary from before the drain settings: test it without them.
            print("multi_replica: this binary refuses server.shutdown_grace_ms/drain_delay_ms;"
                  " running without them", flush=True)
            cfg = d.replica_config(VARIANT, "fp32", {"engine_threads": 1})
        ports = [d.free_port() for _ in range(REPLICAS)]
        lb_port, split_port = d.free_port(), d.free_port()
        reps = [d.start_replica(procs, "replica-%d" % i, p, cfg) for i, p in enumerate(ports)]
        for r in reps:
            if not c.check("%s ready on :%d" % (r.name, r.port), d.wait_ready(r.port, r),
                           procs.log_tail(r)):
                return c.summary()
        if d.IMAGE:
            container_checks(c, reps[0], "at the start")
        mapping = {8081: ports[0], 8082: ports[1], 8083: ports[2], 8080: lb_port,
                   8090: split_port, 8091: ports[0], 8092: ports[1]}
        start = d.start_haproxy if LB == "haproxy" else d.start_nginx
        balancer = start(procs, mapping)
        if not c.check("%s started on :%d" % (LB, lb_port), d.wait_ready(lb_port, balancer, 30),
                       procs.log_tail(balancer)):
            return c.summary()

        load = Load(lb_port)
        load.start()
        time.sleep(2)

        # 1. SIGTERM each replica in turn, then bring it back
        for i, r in enumerate(list(reps)):
            sigterm_one(c, procs, r)
            again = d.start_replica(procs, r.name + "-restarted", r.port, cfg)
            reps[i] = again
            c.check("%s: started again and ready" % again.name, d.wait_ready(again.port, again),
                    procs.log_tail(again))
            time.sleep(1)

        # 2. edit every replica's config under load, twice: the same variant
        #    to another precision (in place), then a new variant replacing it
        def edit(precision, name):
            edited = dict(cfg)
            edited["models"] = [dict(cfg["models"][0], variants=[
                {"name": name, "precision": precision, "traffic": 100}])]
            for r in reps:
                d.write_replica_config(r, edited)

        def wait_all(done):
            t0, pending = time.time(), {r.name: r for r in reps}
            while pending and time.time() - t0 < SWITCH_WAIT_S:
                for name, r in list(pending.items()):
                    if done(r):
                        del pending[name]
                time.sleep(0.25)
            return pending

        def serves_precision(r):
            st, _, body = d.request(r.port, "GET", "/v2/models/minilm", timeout=5)
            if st != 200:
                return False
            vs = json.loads(body).get("parameters", {}).get("variants", [])
            return [(v.get("name"), v.get("precision"), v.get("state", "ready")) for v in vs] \
                == [(VARIANT, new_prec, "ready")]

        def serves_variant(r):
            st, h, _ = d.embed(r.port, "switch check", timeout=10)
            return st == 200 and h.get("x-mantissa-variant") == "b"

        edit(new_prec, VARIANT)
        pending = wait_all(serves_precision)
        c.check("config edit 1: variant %s switched fp32 -> %s in place on every replica within %ds"
                % (VARIANT, new_prec, SWITCH_WAIT_S), not pending,
                "not switched: %s" % ", ".join(sorted(pending)))
        time.sleep(2)
        edit("fp32", "b")
        pending = wait_all(serves_variant)
        c.check("config edit 2: variant b (fp32) replaced %s on every replica within %ds"
                % (VARIANT, SWITCH_WAIT_S), not pending,
                "still on the old variant: %s" % ", ".join(sorted(pending)))
        c.check("config edits: no replica restarted to do them",
                all(r.poll() is None for r in reps),
                ", ".join("%s exit %s" % (r.name, r.poll()) for r in reps if r.poll() is not None))
        time.sleep(2)
        load.finish()
        total = sum(load.outcomes.values())
        print("  load: %d requests, outcomes %s, variants %s"
              % (total, dict(load.outcomes), dict(load.variants)), flush=True)
        c.check("load: at least 100 requests went through", total >= 100, str(total))
        c.check("load: zero failed requests", load.outcomes[200] == total,
                "%d of %d failed; first: %s" % (total - load.outcomes[200], total, load.failures))

        if d.IMAGE:
            container_checks(c, reps[-1], "at the end")
        # the restarted replicas also stop cleanly
        for r in reps:
            r.send_signal(signal.SIGTERM)
        for r in reps:
            try:
                rc = r.wait(timeout=SHUTDOWN_GRACE_MS / 1000 + 10)
            except Exception:
                rc = "timeout"
            c.check("%s: exited 0 on SIGTERM at the end" % r.name, rc == 0, "exit %s" % rc)
        return c.summary()
    finally:
        if load:
            load.finish()
        procs.stop_all()


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--image" in args:
        i = args.index("--image")
        if i + 1 >= len(args):
            sys.exit("usage: multi_replica.py [nginx|haproxy] [--image IMAGE]")
        d.IMAGE = args[i + 1]
        del args[i:i + 2]
    if args:
        if args[0] not in ("nginx", "haproxy") or len(args) > 1:
            sys.exit("usage: multi_replica.py [nginx|haproxy] [--image IMAGE]")
        LB = args[0]
    rc = main()
    sys.exit(d.remove_workdir(WD, rc) if WD else rc)
