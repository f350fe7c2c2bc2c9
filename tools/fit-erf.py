#!/usr/bin/env python3
"""fit-erf.py: fits the rational approximation of erf that GELU uses on the
CPU (kernels/cpu/ops.c, kc_gelu1), and reports its error in FP32.

    erf(u) ~ u P(t) / Q(t),  t = u^2 / 16,  |u| clamped at CLAMP

P and Q have degrees --p and --q (Q's constant term 1). The fit is a linear
least-squares problem (u P(t) - erf(u) Q(t) = 0), solved again with each
point weighted by 1 / Q(t)^2 of the last solution (so that what it
minimises tends to the error of the ratio itself), then reweighted toward
the largest errors (Lawson), on Chebyshev-spaced and uniform points of
[0, CLAMP]. erf in double comes from Python's math.erf.

The report evaluates the FP32 form as the kernel does (each multiply-add
one rounding, as an FMA) on a dense sweep and prints the coefficients as C
float literals. Needs numpy (requirements.txt).

    .venv/bin/python tools/fit-erf.py [--p 5] [--q 5]
"""
import argparse
import math

import numpy as np

CLAMP = 3.925  # past it erf(u) rounds to 1 in FP32
SCALE = 16.0   # t = u^2 / SCALE: a power of two, so the scaling is exact


def fit(deg_p, deg_q, rounds=80):
    u = np.cos(np.linspace(0, np.pi, 8000)) * CLAMP / 2 + CLAMP / 2
    u = np.sort(np.concatenate([u, np.linspace(0, CLAMP, 4000)]))
    e = np.array([math.erf(v) for v in u])
    t = u * u / SCALE
    w = np.ones_like(u)
    qv = np.ones_like(u)
    for r in range(rounds):
        a = np.hstack([u[:, None] * t[:, None] ** np.arange(deg_p + 1),
                       -(e[:, None] * t[:, None] ** np.arange(1, deg_q + 1))])
        s = np.sqrt(w) / qv
        c, *_ = np.linalg.lstsq(a * s[:, None], e * s, rcond=None)
        p, q = c[:deg_p + 1], np.concatenate([[1.0], c[deg_p + 1:]])
        qv = np.polyval(q[::-1], t)
        err = u * np.polyval(p[::-1], t) / qv - e
        if r > 10:
            w = w * (np.abs(err) + 1e-12) ** 0.5
            w /= w.sum()
    return p, q, float(np.abs(err).max())


def erf32(u, p, q):
    """The kernel's FP32 evaluation (FMA: one rounding per multiply-add)."""
    f32 = np.float32
    a = np.minimum(np.abs(u.astype(f32)), f32(CLAMP))
    t = (a * a).astype(f32) * f32(1 / SCALE)
    pv = np.full_like(t, f32(p[-1]))
    qv = np.full_like(t, f32(q[-1]))
    for c in p[-2::-1]:
        pv = (pv.astype(np.float64) * t + float(f32(c))).astype(f32)
    for c in q[-2::-1]:
        qv = (qv.astype(np.float64) * t + float(f32(c))).astype(f32)
    return np.minimum((a * pv).astype(f32) / qv, f32(1)).astype(f32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--p", type=int, default=5)
    ap.add_argument("--q", type=int, default=5)
    a = ap.parse_args()
    p, q, err = fit(a.p, a.q)
    u = np.linspace(0, 4.5, 900001).astype(np.float32)
    ref = np.array([math.erf(float(v)) for v in u])
    got = erf32(u, p, q).astype(np.float64)
    at = int(np.argmax(np.abs(got - ref)))
    print("degrees %d / %d: max |error| %.3g in double, %.3g in FP32 (at u = %.5f)" % (
        a.p, a.q, err, abs(got[at] - ref[at]), u[at]))
    for name, cs in (("P", p), ("Q", q[1:])):
        for i, c in enumerate(cs, 0 if name == "P" else 1):
            print("#define ERF_%s%d %.9gf" % (name, i, np.float32(c)))


if __name__ == "__main__":
    main()
