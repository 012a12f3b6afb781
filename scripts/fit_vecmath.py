#!/usr/bin/python3
# Prints the polynomial coefficients of kernels/cpu/vecmath.hpp again: least-squares fits in
# float64 on Chebyshev nodes, reweighted toward minimax (Lawson), then rounded to float.
#   exp: e^r on [-ln2/2, ln2/2], degree 6, relative error
#   erf, |x| < 1: erf(x) = x (2/sqrt(pi) + x^2 P(x^2)), P of degree 6, relative error of erf
#   erf, 1 <= |x| < 3.95: erfc(x) = Q(x - 2.475), degree 14, absolute error
import math

import sys
try:
    import numpy as np
except ImportError:  # a pyenv or venv python without it: say how to get it, not a traceback
    sys.exit("scripts/fit_vecmath.py: needs numpy: sudo apt-get install python3-numpy, then run it as scripts/fit_vecmath.py (its shebang is /usr/bin/python3, Debian's python)")


def lawson(A, y, weight, rounds=40):
    w = np.ones(len(y))
    for _ in range(rounds):
        c, *_ = np.linalg.lstsq(A * (w * weight)[:, None], y * w * weight, rcond=None)
        e = np.abs(A @ c - y) * weight
        w *= (e / e.max()) ** 0.5 + 1e-3
    c = c.astype(np.float32).astype(np.float64)
    return c, (np.abs(A @ c - y) * weight).max()


def nodes(lo, hi, n=4000):
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (np.arange(n) + 0.5) / n)


def show(name, c, err):
    print(f"{name} (max error {err:.2e}), highest degree first:")
    print("  " + ", ".join("%.9ef" % np.float32(v) for v in c[::-1]))


r = nodes(-math.log(2) / 2, math.log(2) / 2)
c, e = lawson(np.vander(r, 7, increasing=True), np.exp(r), 1 / np.exp(r))
show("exp32 e^r", c, e)

c0 = 2 / math.sqrt(math.pi)
x = nodes(0, 1)
x = x[x > 1e-4]
erf = np.array([math.erf(t) for t in x])
y = (erf / x - c0) / (x * x)
c, e = lawson(np.vander(x * x, 7, increasing=True), y, x ** 3 / erf)
show("erf32 P, |x| < 1", c, e)
hi = np.float32(c0)
print(f"  2/sqrt(pi) = {float(hi):.9e}f + {float(np.float32(c0 - float(hi))):.9e}f")

x = nodes(1, 3.95)
c, e = lawson(np.vander(x - 2.475, 15, increasing=True), np.array([math.erfc(t) for t in x]), np.ones(len(x)))
show("erf32 Q (erfc), 1 <= |x| < 3.95", c, e)
