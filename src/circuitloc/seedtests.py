"""The exact sign-flip test of integer paired differences at any number of pairs (the sweep's
heads-to test: Gehan scores are integers, so their differences are too).

`stats.sign_flip_p` enumerates sign patterns, exactly up to 20 nonzero pairs and by Monte Carlo
above; for integer differences the null distribution of the signed sum is a convolution that a
dynamic program counts exactly for any number of pairs (its cost grows with the sum of |d|, a few
thousand for the sweep's 30 seeds), so a 30-seed sweep keeps an exact test."""

from __future__ import annotations

import numpy as np

MAX_SUM = 2_000_000  # sum of |d| beyond which the dynamic program's array would be too large
EXACT_COUNTS = 53  # nonzero pairs up to which the program counts sign patterns in integers (2^53: exact in a float)


def integer_sign_flip_p(d) -> float | None:
    """Two-sided exact sign-flip p of sum(d) = 0 for integer d (NaN dropped, zeros carry no sign):
    the probability, over independent fair signs, that |sum(s d)| >= |sum(d)|. Exact to float
    rounding (each probability is a multiple of 2^-m). None when d holds a non-integer value or
    sum(|d|) exceeds MAX_SUM: the caller falls back to `stats.sign_flip_p`."""
    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan")
    r = np.rint(d)
    a = np.abs(r)
    if not (np.abs(np.abs(d) - a) <= 1e-9).all() or a.sum() > MAX_SUM:
        return None
    t = int(abs(r.sum()))
    if t == 0:
        return 1.0
    a = a[a > 0].astype(np.int64)
    total = int(a.sum())
    return (_float_p if len(a) > EXACT_COUNTS else _counted_p)(a, total, t)


def _counted_p(a: np.ndarray, total: int, t: int) -> float:
    """P(|signed sum| >= t) for nonzero integers a (their sum `total`) by counting sign patterns:
    count[x] holds the patterns whose '+' pairs sum to x (signed sum 2x - total). At most 2^53
    patterns, so the counts, their sum and its quotient by 2^m are exact: `_float_p`'s p, bit for
    bit (each of its probabilities is a multiple of 2^-m, exact in a float), in a third of the time."""
    count = np.zeros(total + 1, np.int64)
    count[0] = 1
    for v in a:
        count[v:] = count[v:] + count[:-v]
    signed = np.abs(2 * np.arange(total + 1) - total)
    return float(min(1.0, int(count[signed >= t].sum()) / 2 ** len(a)))


def _float_p(a: np.ndarray, total: int, t: int) -> float:
    """The same p by probabilities in floats (beyond EXACT_COUNTS nonzero pairs, where counts would
    overflow): index total + s holds P(signed sum = s)."""
    prob = np.zeros(2 * total + 1)
    prob[total] = 1.0
    for v in a:
        new = np.zeros_like(prob)
        new[v:] += 0.5 * prob[:-v]  # + v
        new[:-v] += 0.5 * prob[v:]  # - v
        prob = new
    sums = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, prob[sums >= t].sum()))
