#!/usr/bin/env python3
# tests/gpu/test_emulate_w8a8_i8.py: emulates kernels/cuda/gemm_w8a8_i8.cu's
# index math on the host (the stage loads into padded shared rows, each
# lane's fragment loads, the mma.m16n8k32 s8 fragment layouts as the PTX ISA
# gives them, the epilogue's row and column per accumulator) for both tile
# shapes and ragged m, n and k, against numpy's int product: every output
# written once and exact. A check for a machine without a GPU; the kernel
# itself is tested on one by test_gpu_q8io. Keep the formulas in step with
# the kernel. make test runs it with pytest (numpy is in tools/requirements.txt);
# alone: .venv/bin/python tests/gpu/test_emulate_w8a8_i8.py
import sys

import numpy as np
BK, SROW, STAGES = 64, 80, 3
def run(WM, WN, MT, NT, m, n, k, ldq, ldw, rng):
    BM, BN, THR = WM*16*MT, WN*8*NT, WM*WN*32
    xq = np.zeros((m, ldq), np.int8); w = np.zeros((n, ldw), np.int8)
    xq[:, :k] = rng.integers(-127, 128, (m, k)); w[:, :k] = rng.integers(-127, 128, (n, k))
    xqb = xq.view(np.uint8).ravel(); wb = w.view(np.uint8).ravel()
    y = np.full((m, n), np.iinfo(np.int64).min, np.int64)
    nk = (k + BK - 1) // BK
    for by in range((m + BM - 1)//BM):
        for bx in range((n + BN - 1)//BN):
            m0, n0 = by*BM, bx*BN
            smem = np.full(STAGES*(BM+BN)*SROW, 0xAB, np.uint8)
            a_base, b_base = 0, STAGES*BM*SROW
            def load(dst, src, ld, r0, rows_valid, k0, ROWS):
                for t in range(THR):
                    for i in range(t, ROWS*4, THR):
                        r, c = i >> 2, (i & 3)*16
                        ok = r0 + r < rows_valid and k0 + c < k
                        d = dst + r*SROW + c
                        smem[d:d+16] = src[(r0+r)*ld + k0 + c:(r0+r)*ld + k0 + c + 16] if ok else 0
            acc = np.zeros((THR, MT, NT, 4), np.int64)
            for kt in range(nk):  # pipeline order does not change the data a stage holds
                s = kt % STAGES
                load(a_base + s*BM*SROW, xqb, ldq, m0, m, kt*BK, BM)
                load(b_base + s*BN*SROW, wb, ldw, n0, n, kt*BK, BN)
                for tid in range(THR):
                    lane, warp = tid & 31, tid >> 5
                    wm, wn, gid, tig = warp % WM, warp // WM, lane >> 2, lane & 3
                    a_st = a_base + s*BM*SROW + (wm*16*MT)*SROW
                    b_st = b_base + s*BN*SROW + (wn*8*NT)*SROW
                    for ks in range(0, BK, 32):
                        lds = lambda p: smem[p:p+4].view(np.int8).astype(np.int64)
                        for mt in range(MT):
                            r = a_st + (mt*16 + gid)*SROW + ks + tig*4
                            a = [lds(r), lds(r + 8*SROW), lds(r + 16), lds(r + 8*SROW + 16)]
                            for nt in range(NT):
                                c = b_st + (nt*8 + gid)*SROW + ks + tig*4
                                b = [lds(c), lds(c + 16)]
                                acc[tid, mt, nt] += mma_lane(a, b, lane, tid, mt, nt, smem, a_st, b_st, ks)
            for tid in range(THR):
                lane, warp = tid & 31, tid >> 5
                wm, wn, gid, tig = warp % WM, warp // WM, lane >> 2, lane & 3
                r0, c0 = m0 + wm*16*MT, n0 + wn*8*NT
                for mt in range(MT):
                    for h in range(2):
                        r = r0 + mt*16 + gid + 8*h
                        if r >= m: continue
                        for nt in range(NT):
                            c = c0 + nt*8 + tig*2
                            if c >= n: continue
                            for j in range(2):
                                if c + j < n:
                                    assert y[r, c+j] == np.iinfo(np.int64).min, "written twice"
                                    y[r, c+j] = acc[tid, mt, nt, 2*h+j]
    ref = xq[:, :k].astype(np.int64) @ w[:, :k].astype(np.int64).T
    return (y == ref).all(), (y == np.iinfo(np.int64).min).sum()

# The mma of a warp needs every lane's fragments: emulate the instruction by
# gathering the warp's A and B tiles from the same smem addresses the lanes
# load, placed by the PTX layout, and return this lane's C fragment.
def mma_lane(a, b, lane, tid, mt, nt, smem, a_st, b_st, ks):
    # reconstruct A (16x32) and B (32x8) from the layout: lane (gid, tig) holds
    # A[gid][tig*4+i] (a0), A[gid+8][..] (a1), A[gid][16+tig*4+i] (a2), A[gid+8][16+..] (a3)
    A = np.zeros((16, 32), np.int64); B = np.zeros((32, 8), np.int64)
    for l in range(32):
        g, t = l >> 2, l & 3
        r = a_st + (mt*16 + g)*SROW + ks + t*4
        ld = lambda p: smem[p:p+4].view(np.int8).astype(np.int64)
        A[g, t*4:t*4+4] = ld(r); A[g+8, t*4:t*4+4] = ld(r + 8*SROW)
        A[g, 16+t*4:16+t*4+4] = ld(r + 16); A[g+8, 16+t*4:16+t*4+4] = ld(r + 8*SROW + 16)
        c = b_st + (nt*8 + g)*SROW + ks + t*4
        B[t*4:t*4+4, g] = ld(c); B[16+t*4:16+t*4+4, g] = ld(c + 16)
    C = A @ B
    g, t = lane >> 2, lane & 3
    return np.array([C[g, 2*t], C[g, 2*t+1], C[g+8, 2*t], C[g+8, 2*t+1]])

CASES = [((2, 2, 2, 4), (7, 20, 48, 48, 48)), ((2, 2, 2, 4), (70, 72, 80, 96, 80)),
         ((2, 4, 4, 4), (130, 136, 64, 80, 64)), ((2, 2, 2, 4), (1, 8, 16, 16, 16))]


def test_kernel_indexing_gives_the_int_product():
    """Both tiles (64x64, 128x128), ragged m, n, k and padded strides."""
    rng = np.random.default_rng()
    for cfg, shape in CASES:
        ok, unwritten = run(*cfg, *shape, rng)
        assert ok and unwritten == 0, (cfg, shape, unwritten)


if __name__ == "__main__":
    rng = np.random.default_rng(1)
    bad = 0
    for cfg, shape in CASES:
        ok, unwritten = run(*cfg, *shape, rng)
        print("tile (WM, WN, MT, NT) %s, (m, n, k, ldq, ldw) %s: %s, %d unwritten"
              % (cfg, shape, "exact" if ok else "MISMATCH", unwritten))
        bad += (not ok) or unwritten > 0
    sys.exit(1 if bad else 0)
