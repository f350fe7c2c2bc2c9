#!/usr/bin/env python3
"""lb_check.py: runs the committed load-balancer config (deploy/nginx/nginx.conf
or deploy/haproxy/haproxy.cfg) for real, in front of real Mantissa replicas
on loopback, and checks what its header promises:

  - the N-replica pool answers every request although one of its replicas
    is down (its address has nothing listening), and keeps answering every
    request when a second replica is killed mid-test (retry on a
    connection failure);
  - the A/B listener pins by X-Mantissa-Variant (int8 / fp32), is sticky
    per X-Mantissa-Route-Key, and splits unpinned traffic about 90/10;
  - neither listener lets the admin API through (403), spelled plainly or
    percent-encoded, and the replicas keep their models.

The two "deployments" are one replica each, whose single variant is named
int8 or fp32 (X-Mantissa-Variant in each answer says which one served). The
int8 one runs int8 when this build supports it, else fp32 under that name:
the routing is what is tested here.

  python3 tests/deploy/lb_check.py nginx|haproxy
Stops by itself (every wait bounded); ends everything it started.
"""
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402


WD = None


def main():
    lb = sys.argv[1] if len(sys.argv) > 1 else "nginx"
    if lb not in ("nginx", "haproxy"):
        sys.exit("usage: lb_check.py nginx|haproxy")
    global WD
    wd = WD = d.workdir("mantissa-lb-%s-" % lb)
    procs = d.Procs(wd)
    c = d.Checks("lb_check %s" % lb)
    try:
        int8_prec = "int8" if d.supports_precision("int8", wd) else "fp32"
        print("lb_check %s: work folder %s; the int8 deployment runs %s" % (lb, wd, int8_prec))
        p_int8, p_fp32, dead, lb_pool, lb_split = (d.free_port() for _ in range(5))
        r_int8 = d.start_replica(procs, "replica-int8", p_int8, d.replica_config("int8", int8_prec))
        r_fp32 = d.start_replica(procs, "replica-fp32", p_fp32, d.replica_config("fp32", "fp32"))
        for r in (r_int8, r_fp32):
            if not c.check("%s ready" % r.name, d.wait_ready(r.port, r), procs.log_tail(r)):
                return c.summary()
        mapping = {8081: p_int8, 8082: p_fp32, 8083: dead, 8091: p_int8, 8092: p_fp32,
                   8080: lb_pool, 8090: lb_split}
        proc = d.start_nginx(procs, mapping) if lb == "nginx" else d.start_haproxy(procs, mapping)
        if not c.check("%s started" % lb, d.wait_ready(lb_pool, proc, 30), procs.log_tail(proc)):
            return c.summary()

        # 1. the pool, with one replica down from the start
        st = collections.Counter(d.embed(lb_pool)[0] for _ in range(30))
        c.check("pool: 30/30 answered 200 with one replica down", st == {200: 30}, str(dict(st)))

        # 2. pins
        for v in ("int8", "fp32"):
            got = collections.Counter()
            for _ in range(10):
                s, h, b = d.embed(lb_split, headers={"X-Mantissa-Variant": v})
                got[(s, h.get("x-mantissa-variant"))] += 1
            c.check("split: X-Mantissa-Variant: %s pins 10/10" % v, got == {(200, v): 10},
                    str(dict(got)))

        # 3. stickiness per route key
        sticky = True
        seen = {}
        for k in range(6):
            key = "user-%d" % k
            vs = set()
            for _ in range(6):
                s, h, _ = d.embed(lb_split, headers={"X-Mantissa-Route-Key": key})
                vs.add((s, h.get("x-mantissa-variant")))
            seen[key] = vs
            sticky &= len(vs) == 1 and next(iter(vs))[0] == 200
        c.check("split: each X-Mantissa-Route-Key sticks to one deployment", sticky, str(seen))

        # 4. the weighted split (binomial n=200, p=0.9: mean 180, sd 4.2)
        got = collections.Counter()
        for _ in range(200):
            s, h, _ = d.embed(lb_split)
            got[h.get("x-mantissa-variant") if s == 200 else "status %s" % s] += 1
        c.check("split: unpinned traffic is about 90/10 (int8 in [160, 195] of 200)",
                160 <= got["int8"] <= 195 and got["int8"] + got["fp32"] == 200, str(dict(got)))

        # 5. the admin API stays on the replicas' own ports
        admin = [("GET", "/v2/admin/config"), ("POST", "/v2/admin/reload"),
                 ("POST", "/v2/repository/models/minilm/unload"),
                 ("POST", "/v2/%72epository/models/minilm/unload"),
                 ("POST", "/v2/repository/index"), ("POST", "/v2/models/minilm/compare")]
        got = {}
        for port in (lb_pool, lb_split):
            for method, path in admin:
                got[(port, method, path)] = d.request(port, method, path, {})[0]
        c.check("admin API: 403 through both listeners", set(got.values()) == {403}, str(got))
        st = collections.Counter(d.embed(lb_pool)[0] for _ in range(10))
        c.check("pool: still serving after the admin attempts", st == {200: 10}, str(dict(st)))

        # 6. a replica dies under the pool: no failed request
        r_fp32.kill()
        r_fp32.wait(timeout=10)
        time.sleep(0.2)
        st = collections.Counter(d.embed(lb_pool)[0] for _ in range(30))
        c.check("pool: 30/30 answered 200 after a second replica was killed", st == {200: 30},
                str(dict(st)))
        return c.summary()
    finally:
        procs.stop_all()


if __name__ == "__main__":
    rc = main()
    sys.exit(d.remove_workdir(WD, rc) if WD else rc)
