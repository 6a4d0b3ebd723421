"""The damage interval by regime: a ratio drop / (clean - floor) over prompts whose interval method
depends on how noisy its denominator (the clean-minus-floor span) is.

Every function takes one row per ratio, numerator `num` [U, N] and denominator `den` [U, N] (or one
[N] shared by every row), and the resample weights `w` [B, N] (`stats.bootstrap_weights`), so the
same code reads the intervals of a run's units and of thousands of simulated prompt sets at once
(tests/unit/test_coverage.py measures its coverage that way). The damage interval is studentized where
the span is quiet, Fieller's where it is noisy, and widened where the prompts are skewed
(`damage_bounds`). And the binomial interval of a guided greedy's audit (`audit_agreement`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

RATIO_METHODS = ("percentile", "bca", "studentized", "fieller")
# The span's relative standard error se(mean span) / |mean span| (= its per-prompt CV / sqrt(N))
# above which the studentized ratio interval under-covers and Fieller's interval is used
# (tests/unit/test_coverage.py measures both sides of the cut; docs/method.md quotes the table).
NOISY_SPAN = 0.1
# A run's prompts are "skewed" where the per-prompt influence of the ratio (drop - damage x span) or
# the span itself has a sample skewness g beyond SKEWED, or the skewness of their mean, g / sqrt(N),
# beyond MEAN_SKEW (g beyond 0.08 sqrt(N): the stricter test up to 156 prompts, 0.62 at 60): its
# damage interval is then widened to the hull of its own interval and the percentile and
# studentized intervals at level WIDE_CI (method `WIDENED`). Fewer than MIN_PROMPTS prompts: the
# interval may under-cover (the flag). It detects few prompts, not a bad interval: a skewed or
# heavy-tailed task whose tail a run of 20 prompts did not draw looks unskewed, and such runs cover
# 0.78-0.88 even widened (the table's "look unskewed" column); from 60 prompts on, every run of the
# coverage test's skewed and heavy-tailed cases is widened and the runs without a note cover >= 0.93
# in every case (docs/method.md, tests/unit/test_coverage.py).
MIN_PROMPTS = 60
SKEWED = 1.0
MEAN_SKEW = 0.08
WIDE_CI = 0.99
WIDENED = "widened"
SKEWED_NOTE = "interval widened (skewed prompts)"
FEW_NOTE = f"interval may under-cover (fewer than {MIN_PROMPTS} prompts)"


def _rows(num, den):
    d = np.atleast_2d(np.asarray(num, float))
    s = np.broadcast_to(np.asarray(den, float), d.shape)
    return d, s


def span_rse(den) -> np.ndarray:
    """se(mean) / |mean| of each row of `den` [U, N] (or [N]): how noisy the damage's denominator
    is, the rule `damage_method` reads (inf where the mean is 0)."""
    s = np.atleast_2d(np.asarray(den, float))
    n = s.shape[1]
    m = s.mean(axis=1)
    se = s.std(axis=1) / np.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(m) > 1e-12, se / np.abs(m), np.inf)


def damage_method(den) -> np.ndarray:
    """Per row: "studentized" where the span is quiet (relative se <= `NOISY_SPAN`), else
    "fieller" (the studentized interval under-covers there: its standard error is a linearization
    that fails as the span nears 0)."""
    return np.where(span_rse(den) <= NOISY_SPAN, "studentized", "fieller")


def _quantile_cols(boots, q) -> np.ndarray:
    """Per column of boots [B, U], its own level q [U] (linear interpolation, NaN left out)."""
    b = np.sort(boots, axis=0)  # NaN last
    m = np.sum(np.isfinite(b), axis=0)
    pos = np.clip(q, 0, 1) * np.maximum(m - 1, 0)
    i0 = np.floor(pos).astype(int)
    i1 = np.minimum(i0 + 1, np.maximum(m - 1, 0))
    cols = np.arange(b.shape[1])
    out = b[i0, cols] + (pos - i0) * (b[i1, cols] - b[i0, cols])
    return np.where(m > 0, out, np.nan)


def ratio_bounds(num, den, w, ci: float = 0.95, method: str = "studentized") -> tuple:
    """(lo, hi) of mean(num_u) / mean(den_u) per row, numerator and denominator from the same
    resample. percentile, bca (jackknife acceleration), studentized (delta-method se, as
    `stats.ratio_intervals`), fieller (Fieller's interval, t with N - 1 degrees of freedom;
    -inf/inf where the span is not clearly away from 0). A mean denominator of (near) 0: NaN."""
    if method not in RATIO_METHODS:
        raise ValueError(f"unknown interval method {method!r}: expected one of {', '.join(RATIO_METHODS)}")
    d, s = _rows(num, den)
    n = d.shape[1]
    a = (1 - ci) / 2
    D, S = d.mean(axis=1), s.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(np.abs(S) > 1e-12, D / S, np.nan)
        if method == "fieller":
            from scipy.special import stdtrit  # here: a job that reads no interval imports no scipy (0.3 s)

            return _fieller(d, s, est, stdtrit(max(n - 1, 1), 1 - a))
        Db, Sb = w @ d.T, w @ s.T  # [B, U]
        boots = np.where(np.abs(Sb) > 1e-12, Db / Sb, np.nan)
        lo, hi = np.full(est.shape, np.nan), np.full(est.shape, np.nan)
        ok = np.isfinite(est)
        if method == "percentile":
            lo, hi = _quantile_cols(boots, np.full(est.shape, a)), _quantile_cols(boots, np.full(est.shape, 1 - a))
        elif method == "bca":
            from scipy.special import ndtr, ndtri

            fin = np.isfinite(boots)
            frac = (np.sum(boots < est, axis=0) + 0.5 * np.sum(boots == est, axis=0)) / np.maximum(fin.sum(axis=0), 1)
            lim = 0.5 / np.maximum(fin.sum(axis=0), 1)
            z0 = ndtri(np.clip(frac, lim, 1 - lim))
            jack = (d.sum(axis=1)[None, :] - d.T) / (s.sum(axis=1)[None, :] - s.T)  # [N, U]
            dj = np.nanmean(jack, axis=0) - jack
            dj = np.where(np.isfinite(dj), dj, 0.0)
            den3 = 6 * np.sum(dj ** 2, axis=0) ** 1.5
            acc = np.where(den3 > 0, np.sum(dj ** 3, axis=0) / den3, 0.0)
            z = ndtri(np.array([a, 1 - a]))[:, None]
            lv = ndtr(z0 + (z0 + z) / (1 - acc * (z0 + z)))
            lo, hi = _quantile_cols(boots, lv[0]), _quantile_cols(boots, lv[1])
        else:
            se = np.sqrt(np.mean((d - est[:, None] * s) ** 2, axis=1) / n) / np.abs(S)
            var_b = w @ (d ** 2).T - 2 * boots * (w @ (d * s).T) + boots ** 2 * (w @ (s ** 2).T)
            se_b = np.sqrt(np.maximum(var_b, 0.0) / n) / np.abs(Sb)
            t = (boots - est) / se_b
            t[~np.isfinite(t)] = np.nan
            flat = se <= 1e-12 * np.maximum(1.0, np.abs(est))
            q_lo = _quantile_cols(t, np.full(est.shape, a))
            q_hi = _quantile_cols(t, np.full(est.shape, 1 - a))
            lo = np.where(flat, est, est - q_hi * se)
            hi = np.where(flat, est, est - q_lo * se)
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def _fieller(d, s, est, t) -> tuple:
    """Fieller: every r with (D - r S)^2 <= t^2 var(D - r S) / N, a quadratic a r^2 + b r + c <= 0;
    bounded only where a > 0 (the span's own t-interval excludes 0), else (-inf, inf)."""
    n = d.shape[1]
    D, S = d.mean(axis=1), s.mean(axis=1)
    vdd = d.var(axis=1, ddof=1) / n
    vss = s.var(axis=1, ddof=1) / n
    vds = np.sum((d - D[:, None]) * (s - S[:, None]), axis=1) / (n - 1) / n
    qa, qb, qc = S ** 2 - t ** 2 * vss, -2 * (D * S - t ** 2 * vds), D ** 2 - t ** 2 * vdd
    disc = qb ** 2 - 4 * qa * qc
    bounded = (qa > 0) & (disc >= 0)
    root = np.sqrt(np.where(bounded, disc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(bounded, (-qb - root) / (2 * qa), -np.inf)
        hi = np.where(bounded, (-qb + root) / (2 * qa), np.inf)
    ok = np.isfinite(est)
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def skewness(x) -> np.ndarray:
    """Sample skewness of each row of x [U, N]; 0 where a row has no spread."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = x - x.mean(axis=1, keepdims=True)
        g = np.mean(e ** 3, axis=1) / np.mean(e ** 2, axis=1) ** 1.5
    return np.where(np.isfinite(g), g, 0.0)


def influence_skew(num, den) -> np.ndarray:
    """Per row: the sample skewness of drop - damage x span over prompts (the ratio's per-prompt
    influence); 0 where it has no spread."""
    d, s = _rows(num, den)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = d - (d.mean(axis=1) / s.mean(axis=1))[:, None] * s
    return skewness(np.where(np.isfinite(e), e, 0.0))


def skew_limit(n: int) -> float:
    """The sample skewness beyond which N prompts are `skewed`: `SKEWED`, or `MEAN_SKEW` x sqrt(N)
    where that is less (fewer than 156 prompts), so that the skewness of their mean is what counts
    (0.36 at 20 prompts, 0.62 at 60, 1 from 157)."""
    return min(SKEWED, MEAN_SKEW * float(np.sqrt(n)))


def skewed(num, den) -> np.ndarray:
    """Per row: are the prompts skewed, |skewness| beyond `skew_limit` of the ratio's per-prompt
    influence (`influence_skew`) or of the span? Such a row's damage interval is widened."""
    d, s = _rows(num, den)
    lim = skew_limit(d.shape[1])
    return (np.abs(influence_skew(d, s)) > lim) | (np.abs(skewness(s)) > lim)


def may_undercover(num, den) -> np.ndarray:
    """Per row: fewer than `MIN_PROMPTS` prompts. What it detects is the count: below it, a skewed
    or heavy-tailed task's runs whose prompts look unskewed (the tail not drawn) cover 0.78-0.88 at
    20 prompts in the coverage test, and no statistic of a run's own prompts tells them apart (docs/method.md)."""
    d, _ = _rows(num, den)
    return np.full(d.shape[0], d.shape[1] < MIN_PROMPTS)


def damage_bounds(num, den, w, ci: float = 0.95) -> tuple:
    """(lo, hi, method, fewer than `MIN_PROMPTS` prompts) of each row's damage: its method chosen
    by `damage_method` from the span; where the prompts are `skewed`, the hull of that interval and
    the percentile and studentized intervals at level 1 - (1 - ci) / 5 (`WIDE_CI` at ci 0.95),
    method `WIDENED`."""
    d, s = _rows(num, den)
    method = damage_method(s)
    lo, hi = np.full(d.shape[0], np.nan), np.full(d.shape[0], np.nan)
    for m in np.unique(method):
        rows = method == m
        lo[rows], hi[rows] = ratio_bounds(d[rows], s[rows], w, ci, str(m))
    wide = skewed(d, s) & np.isfinite(lo) & np.isfinite(hi)  # an unbounded interval stays unbounded
    if wide.any():
        level = 1 - (1 - ci) * (1 - WIDE_CI) / 0.05
        for m in ("percentile", "studentized"):
            a, b = ratio_bounds(d[wide], s[wide], w, level, m)
            lo[wide], hi[wide] = np.fmin(lo[wide], a), np.fmax(hi[wide], b)
        method = np.where(wide, WIDENED, method)
    return lo, hi, method, may_undercover(d, s)


def note(method, few) -> str:
    """The tables' note on one damage interval (`*_ci_note`): `SKEWED_NOTE` where it was widened,
    `FEW_NOTE` with fewer than `MIN_PROMPTS` prompts, both joined by '; ', else ''."""
    return "; ".join(n for n, on in ((SKEWED_NOTE, method == WIDENED), (FEW_NOTE, bool(few))) if on)


def clopper_pearson(k: int, n: int, ci: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) `ci` interval of a binomial share k / n: the p at which
    P(X >= k) and P(X <= k) are each (1 - ci) / 2 (0 for k = 0, 1 for k = n); (NaN, NaN) for n = 0."""
    if n <= 0:
        return float("nan"), float("nan")
    from scipy.special import betaincinv

    a = (1 - ci) / 2
    lo = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, a))
    hi = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - a))
    return lo, hi


def audit_agreement(curve: pl.DataFrame, ci: float = 0.95) -> dict:
    """A curve file's guided (or screened) greedy audit (engine.greedy): its steps chosen from a
    shortlist (`n_guided_steps`: attribution's, or the screen's), its audited steps, how many of them agree (attribution's pick was the exact
    best) and that share in % with its exact Clopper-Pearson `ci` interval (NaN without audited steps)."""
    g = curve.filter(pl.col("method") == "greedy") if "method" in curve.columns else curve.clear()
    guided = int((g["chosen_by"].fill_null("exact") != "exact").sum()) if "chosen_by" in g.columns else 0
    audited = g.filter(pl.col("audited").fill_null(False)) if "audited" in g.columns else g.clear()
    n = len(audited)
    k = int(audited["audit_agrees"].fill_null(False).sum()) if n else 0
    lo, hi = clopper_pearson(k, n, ci)
    return {"n_guided_steps": guided, "n_audited_steps": n, "n_audit_agrees": k,
            "audit_agree_pct": 100 * k / n if n else float("nan"), "audit_agree_pct_lo": 100 * lo,
            "audit_agree_pct_hi": 100 * hi}
