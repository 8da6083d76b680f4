#!/usr/bin/python3
"""Fits the rational erf of kernels/cpu/simd.h (fast_erf) and checks it in fp32.

erf(z) = z * P(z^2) / Q(z^2) on [0, 4], Q(0) = 1. The fit is a linearised
least-squares problem (P - f Q, weighted by 1 / (f Q_prev) for relative error)
whose weights are updated Lawson's way (w *= |error|) so that it tends to the
minimax fit. The variable is scaled to s = z^2 / 16 in [0, 1] while fitting.
Prints the maximum relative error of the fit in double and the coefficients
rounded to fp32 for simd.h (shortest digits that give the same float), then
the error of Phi(x) = (1 + erf(x / sqrt 2)) / 2 from those coefficients
evaluated in fp32 without FMA, on tests/kernels' grid (200,001 points in
[-10, 10]); the test measures the kernel itself.

Needs numpy and mpmath (Debian: python3-numpy python3-mpmath); not used by the
build or the tests.

  /usr/bin/python3 tools/fit_erf.py [--np 6] [--nq 4]
"""
import argparse
import math

import mpmath as mp
import numpy as np

Z = 4.0  # erf(4) = 1 - 1.5e-8 rounds to 1 in fp32: beyond, the kernel clamps


def fit(np_, nq, m=3000, iters=300):
    z = (1 - np.cos(np.pi * (np.arange(m) + 0.5) / m)) / 2 * Z
    f = np.array([float(mp.erf(mp.mpf(v)) / mp.mpf(v)) for v in z])
    s = (z / Z) ** 2
    vp = np.vander(s, np_ + 1, increasing=True)
    vq = np.vander(s, nq + 1, increasing=True)[:, 1:]
    q_prev, w, best = np.ones(m), np.ones(m) / m, None
    for _ in range(iters):
        a = np.hstack([vp, -f[:, None] * vq]) / (f * q_prev)[:, None]
        b = 1 / q_prev
        sw = np.sqrt(w)
        coef, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        p, q = coef[: np_ + 1], np.concatenate([[1.0], coef[np_ + 1 :]])
        qv = vq @ q[1:] + 1
        err = (vp @ p / qv - f) / f
        e = np.abs(err).max()
        if best is None or e < best[0]:
            best = (e, p.copy(), q.copy())
        q_prev = qv
        w = w * np.abs(err)
        w /= w.sum()
    e, p, q = best
    scale = np.array([Z ** (-2 * i) for i in range(max(np_, nq) + 1)])
    return e, p * scale[: np_ + 1], q * scale[: nq + 1]


def horner32(c, t):
    acc = np.float32(c[-1])
    for k in c[-2::-1]:
        acc = (acc * t + np.float32(k)).astype(np.float32)
    return acc


def check(p32, q32):
    x = np.linspace(-10, 10, 200001).astype(np.float32)
    z = np.clip((x * np.float32(0.70710678118654752)).astype(np.float32), -Z, Z).astype(np.float32)
    t = (z * z).astype(np.float32)
    erf = np.clip((z * horner32(p32, t) / horner32(q32, t)).astype(np.float32), -1, 1)
    phi = (np.float32(0.5) + np.float32(0.5) * erf).astype(np.float32)
    worst_abs = worst_rel = 0.0
    for xi, ph in zip(x.tolist(), phi.tolist()):
        true = 0.5 * (1 + math.erf(xi / math.sqrt(2)))
        worst_abs = max(worst_abs, abs(ph - true))
        if true >= 1.5e-3:
            worst_rel = max(worst_rel, abs(ph - true) / true)
    return worst_abs, worst_rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=6, help="degree of P in z^2")
    ap.add_argument("--nq", type=int, default=4, help="degree of Q in z^2")
    args = ap.parse_args()
    mp.mp.dps = 30
    e, p, q = fit(args.np, args.nq)
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    print(f"fit ({args.np}, {args.nq}): max relative error of erf(z)/z on [0, {Z:g}]: {e:.3e}")
    def digits(c):
        return np.format_float_scientific(c, unique=True, trim="0") + "f"

    print("P (t^0 first):", ", ".join(digits(c) for c in p32))
    print("Q (t^0 first):", ", ".join(digits(c) for c in q32))
    worst_abs, worst_rel = check(p32, q32)
    print(f"Phi in fp32 over [-10, 10]: max absolute error {worst_abs:.3e}, relative {worst_rel:.3e} where Phi >= 1.5e-3")


if __name__ == "__main__":
    main()
