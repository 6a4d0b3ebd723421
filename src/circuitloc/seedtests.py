"""The exact sign-flip test of integer paired differences at any number of pairs (the sweep's
heads-to test: Gehan scores are integers, so their differences are too).

`stats.sign_flip_p` enumerates sign patterns, exactly up to 20 nonzero pairs and by Monte Carlo
above; for integer differences the null distribution of the signed sum is a convolution that a
dynamic program counts exactly for any number of pairs (its cost grows with the sum of |d|, a few
thousand for the sweep's 30 seeds), so a 30-seed sweep keeps an exact test."""

from __future__ import annotations

import numpy as np

MAX_SUM = 2_000_000  # sum of |d| beyond which the dynamic program's array would be too large


def integer_sign_flip_p(d) -> float | None:
    """Two-sided exact sign-flip p of sum(d) = 0 for integer d (NaN dropped, zeros carry no sign):
    the probability, over independent fair signs, that |sum(s d)| >= |sum(d)|. Exact to float
    rounding (each probability is a multiple of 2^-m). None when d holds a non-integer value or
    sum(|d|) exceeds MAX_SUM: the caller falls back to `stats.sign_flip_p`."""
    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan")
    a = np.abs(np.rint(d))
    if not np.allclose(np.abs(d), a, rtol=0, atol=1e-9) or a.sum() > MAX_SUM:
        return None
    t = int(abs(np.rint(d).sum()))
    if t == 0:
        return 1.0
    a = a[a > 0].astype(np.int64)
    total = int(a.sum())
    prob = np.zeros(2 * total + 1)
    prob[total] = 1.0  # index total + s holds P(signed sum = s)
    for v in a:
        new = np.zeros_like(prob)
        new[v:] += 0.5 * prob[:-v]  # + v
        new[:-v] += 0.5 * prob[v:]  # - v
        prob = new
    sums = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, prob[sums >= t].sum()))
