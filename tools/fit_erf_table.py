#!/usr/bin/env python3
"""fit_erf_table.py — makes the coefficient table of the CPU backend's vector erf
(src/backend/cpu/cpu_vec.c, cpu_erf8/cpu_erf16) and checks it.

erf(a) for a = |x| in [0, 4] is a polynomial of degree 7 on each of 8 intervals of width 0.5, in
the local variable v = 2a - (k + 0.5) in [-0.5, 0.5] (k the interval); past 4 erf is 1 in f32.
Each interval's coefficients are the least-squares fit on 200 Chebyshev nodes in float64, then
rounded to f32. The check evaluates the table as the C code does (f32 Horner in fused
multiply-adds) on a dense grid of f32 inputs and prints the largest absolute error against
float64 erf. Needs numpy. Prints the C table (coefficient-major: row j holds c_j of the 8
intervals) and the error.
"""
import math

import numpy as np

INTERVALS, WIDTH, DEGREE = 8, 0.5, 7


def fit():
    n = 200
    v = 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    rows = []
    for k in range(INTERVALS):
        a = (k + 0.5 + v) * WIDTH
        y = np.array([math.erf(t) for t in a])
        co, *_ = np.linalg.lstsq(np.vander(v, DEGREE + 1, increasing=True), y, rcond=None)
        rows.append(co.astype(np.float32))
    return np.array(rows)  # [interval][coefficient]


def evaluate(table, x):
    """The C code's operations on f32 (a fused multiply-add rounds once: f64 product + add, then f32)."""
    x = x.astype(np.float32)
    a = np.minimum(np.float32(INTERVALS * WIDTH), np.abs(x))
    t = a * np.float32(1 / WIDTH)
    k = np.minimum(t.astype(np.int32), INTERVALS - 1)
    v = t - (k.astype(np.float32) + np.float32(0.5))
    r = table[k, DEGREE]
    for j in range(DEGREE - 1, -1, -1):
        r = (r.astype(np.float64) * v.astype(np.float64) + table[k, j].astype(np.float64)).astype(np.float32)
    return np.copysign(r, x)


def c_hex(c):
    """An f32 as a C hex float literal, without the trailing zeros float.hex() writes."""
    m, e = float(c).hex().split("p")
    return m.rstrip("0").rstrip(".") + "p" + e + "f"


def main():
    table = fit()
    print("static const float erf_table[%d][%d] = {" % (DEGREE + 1, INTERVALS))
    for j in range(DEGREE + 1):
        print("    {" + ", ".join(c_hex(c) for c in table[:, j]) + "},")
    print("};")
    x = np.linspace(-5, 5, 2_000_001).astype(np.float32)
    err = np.abs(evaluate(table, x).astype(np.float64) - np.array([math.erf(float(t)) for t in x]))
    print("/* largest absolute error on [-5, 5]: %.3g */" % err.max())


if __name__ == "__main__":
    main()
