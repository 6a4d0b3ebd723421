"""Uncertainty over prompts (paired bootstrap) and agreement between two sets of unit scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitloc import intervals
from circuitloc.seedtests import integer_sign_flip_p

# How every interval over prompts is read off its resamples (drops, curve steps' drops, the clean
# span; the damage by its span's noise: `intervals.damage_bounds`): studentized (bootstrap-t), because percentile intervals (and BCa, nearly the same for a
# mean) under-cover at the prompt counts a run uses: 0.91 at 20 prompts for normal drops, 0.85
# for skewed ones, where bootstrap-t gives 0.95 and 0.94 (bench/coverage.py measures all three).
INTERVAL = "studentized"
INTERVAL_METHODS = ("percentile", "bca", "studentized")


def bootstrap_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n]: how often each prompt is drawn in each resample, divided by n, so that
    weights @ values is the resample's mean."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    counts = np.zeros((n_boot, n))
    np.add.at(counts, (np.arange(n_boot)[:, None], idx), 1)
    return counts / n


@dataclass(frozen=True)
class Resampled:
    """Estimates of U quantities and what an interval is read from: `est` [U], their resamples
    `boots` [B, U], standard errors `se` [U] and each resample's own `se_boots` [B, U] (studentized),
    leave-one-prompt-out estimates `jack` [N, U] (BCa; None where not needed)."""

    est: np.ndarray
    boots: np.ndarray
    se: np.ndarray
    se_boots: np.ndarray
    jack: np.ndarray | None = None


def _bounds(r: Resampled, ci: float, method: str):
    """(lo, hi), one per column of `r`. percentile: the resamples' quantiles. bca: quantiles moved
    by the bias (z0) and the jackknife acceleration. studentized: quantiles of
    t* = (boot - est) / se* applied to the estimate's own standard error. A column whose estimate is
    not finite gets NaN; one without spread (se 0) the estimate itself."""
    a = (1 - ci) / 2
    est, boots, se, se_boots, jack = np.asarray(r.est, float), r.boots, r.se, r.se_boots, r.jack
    lo, hi = np.full(est.shape, np.nan), np.full(est.shape, np.nan)
    ok = np.isfinite(est) & np.isfinite(boots).any(axis=0)
    if method == "percentile":
        if ok.any():
            lo[ok], hi[ok] = np.nanquantile(boots[:, ok], [a, 1 - a], axis=0)
        return lo, hi
    if method == "bca":
        # here, and scipy.special, not scipy.stats (what norm.ppf/cdf call): a table or report job
        # that reads no BCa interval imports no scipy (about 0.3 s of CPU per job)
        from scipy.special import ndtr, ndtri

        z = ndtri(np.asarray([a, 1 - a]))
        for u in np.flatnonzero(ok):
            b = boots[:, u][np.isfinite(boots[:, u])]
            frac = (np.sum(b < est[u]) + 0.5 * np.sum(b == est[u])) / len(b)
            z0 = ndtri(np.clip(frac, 0.5 / len(b), 1 - 0.5 / len(b)))
            d = np.nanmean(jack[:, u]) - jack[:, u]
            d = d[np.isfinite(d)]
            den = 6 * np.sum(d ** 2) ** 1.5
            acc = float(np.sum(d ** 3) / den) if den > 0 else 0.0
            lo[u], hi[u] = np.quantile(b, ndtr(z0 + (z0 + z) / (1 - acc * (z0 + z))))
        return lo, hi
    if method != "studentized":
        raise ValueError(f"unknown interval method {method!r}: expected one of {', '.join(INTERVAL_METHODS)}")
    flat = ok & (se <= 1e-12 * np.maximum(1.0, np.abs(est)))
    lo[flat] = hi[flat] = est[flat]
    ok &= ~flat
    if ok.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (boots[:, ok] - est[ok]) / se_boots[:, ok]
        t[~np.isfinite(t)] = np.nan  # a resample of one repeated prompt has no spread of its own
        q_lo, q_hi = np.nanquantile(t, [a, 1 - a], axis=0)
        lo[ok], hi[ok] = est[ok] - q_hi * se[ok], est[ok] - q_lo * se[ok]
    return lo, hi


def mean_intervals(values, w, ci: float = 0.95, method: str = INTERVAL) -> tuple:
    """(lo, hi) of the mean over prompts of each row of `values` [U, N], from the resample weights
    `w` [B, N] (`bootstrap_weights`)."""
    x = np.atleast_2d(np.asarray(values, float))
    n = x.shape[1]
    est, boots = x.mean(axis=1), w @ x.T  # [U], [B, U]
    se = np.sqrt(np.mean((x - est[:, None]) ** 2, axis=1) / n)
    se_boots = np.sqrt(np.maximum(w @ (x ** 2).T - boots ** 2, 0.0) / n)
    jack = (x.sum(axis=1)[None, :] - x.T) / max(n - 1, 1) if method == "bca" else None
    return _bounds(Resampled(est, boots, se, se_boots, jack), ci, method)


def ratio_intervals(num, den, w, ci: float = 0.95, method: str = INTERVAL) -> tuple:
    """(lo, hi) of mean(num_u) / mean(den) for each row of `num` [U, N] over one denominator `den`
    [N], numerator and denominator from the same resample; studentized with the delta-method
    standard error sqrt(mean((num - r den)^2) / N) / |mean(den)|. A ratio over a mean denominator
    of (near) 0 is NaN, in the estimate and in a resample."""
    d, s = np.atleast_2d(np.asarray(num, float)), np.asarray(den, float)
    n = d.shape[1]
    S = s.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(abs(S) > 1e-12, d.mean(axis=1) / S, np.nan)
        Sb = w @ s  # [B]
        Db = w @ d.T  # [B, U]
        keep = np.abs(Sb)[:, None] > 1e-12
        boots = np.where(keep, Db / Sb[:, None], np.nan)
        se = np.sqrt(np.mean((d - est[:, None] * s[None, :]) ** 2, axis=1) / n) / abs(S)
        var_b = w @ (d ** 2).T - 2 * boots * (w @ (d * s[None, :]).T) + boots ** 2 * (w @ s ** 2)[:, None]
        se_boots = np.sqrt(np.maximum(var_b, 0.0) / n) / np.abs(Sb)[:, None]
        jack = None
        if method == "bca":
            jack = (d.sum(axis=1)[None, :] - d.T) / (s.sum() - s)[:, None]
    return _bounds(Resampled(est, boots, se, se_boots, jack), ci, method)


@dataclass(frozen=True)
class Bootstrap:
    """How prompts are resampled: `n` resamples drawn with `seed`, intervals at `ci`
    (config `bootstrap:` and the run's seed)."""

    n: int
    seed: int
    ci: float = 0.95

    @classmethod
    def of(cls, block: dict | None) -> Bootstrap | None:
        """From a rule's {n, seed, ci} (None: no intervals)."""
        return cls(int(block["n"]), int(block["seed"]), float(block.get("ci", 0.95))) if block else None


def drop_intervals(clean, ablated, higher_is_better: bool, boot: Bootstrap, floor=None) -> dict:
    """Intervals (`INTERVAL`: studentized) of each unit's drop, resampling prompts (the same draw
    for the clean and every ablated run: paired), and how often each unit is the top unit across
    resamples. clean: [N] per-prompt clean metric; ablated: [U, N] per-prompt metric with unit u
    ablated. With `floor` (the metric when the task is gone: a number, or [N] per prompt), also the
    interval of the damage drop / (clean - floor), numerator and denominator from the same resample,
    its method chosen by the span's noise (`intervals.damage_bounds`: damage_ci, damage_ci_undercover)."""
    n_boot, seed, ci = boot.n, boot.seed, boot.ci
    clean, ablated = np.asarray(clean, float), np.atleast_2d(np.asarray(ablated, float))
    per_prompt = clean[None, :] - ablated
    if not higher_is_better:
        per_prompt = -per_prompt
    w = bootstrap_weights(clean.shape[0], n_boot, seed)
    boots = w @ per_prompt.T  # [B, U]
    top = np.bincount(boots.argmax(axis=1), minlength=ablated.shape[0]) / n_boot
    lo, hi = mean_intervals(per_prompt, w, ci)
    out = {"lo": lo, "hi": hi, "top_freq": top}
    if floor is not None:
        span_pp = clean - np.broadcast_to(np.asarray(floor, float), clean.shape)
        lo, hi, method, flag = intervals.damage_bounds(per_prompt, span_pp if higher_is_better else -span_pp, w, ci)
        out.update(damage_lo=lo, damage_hi=hi, damage_ci=method, damage_ci_undercover=flag)
    return out


def span_interval(clean, floor, higher_is_better: bool, boot: Bootstrap) -> tuple:
    """Interval (`INTERVAL`) of mean(clean - floor) over prompts (for a loss, floor - clean): how
    clearly the clean metric stands above the metric with the task gone, the denominator of every
    damage ratio. `floor`: a number or one value per prompt, resampled with the prompts."""
    n_boot, seed, ci = boot.n, boot.seed, boot.ci
    clean = np.asarray(clean, float)
    span = clean - np.broadcast_to(np.asarray(floor, float), clean.shape)
    span = span if higher_is_better else -span
    if len(span) == 0:
        return float("nan"), float("nan")
    lo, hi = mean_intervals(span[None, :], bootstrap_weights(len(span), n_boot, seed), ci)
    return float(lo[0]), float(hi[0])


def agreement(a, b, labels, k: int = 5) -> dict:
    """Do two conditions pick the same units? Top unit equal, Spearman of the scores, top-k overlap."""
    a, b, labels = np.asarray(a, float), np.asarray(b, float), np.asarray(labels)
    top_a, top_b = labels[np.argmax(a)], labels[np.argmax(b)]
    k = min(k, len(labels))
    set_a, set_b = set(labels[np.argsort(-a, kind="stable")[:k]]), set(labels[np.argsort(-b, kind="stable")[:k]])
    from scipy.stats import spearmanr  # here: only the stability tables need it

    rho = spearmanr(a, b).statistic if np.std(a) > 0 and np.std(b) > 0 else np.nan
    return {"top_a": str(top_a), "top_b": str(top_b), "same_top": bool(top_a == top_b), "spearman": float(rho),
            f"top{k}_overlap": len(set_a & set_b) / k}


# -- across seeds: multiple comparisons, censored values, exact paired tests ----------------------

def _adjust(p, adjust_sorted) -> np.ndarray:
    """Apply `adjust_sorted` (ascending finite p-values -> adjusted) to the finite entries of p."""
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if len(ok):
        order = ok[np.argsort(p[ok], kind="stable")]
        out[order] = adjust_sorted(p[order])
    return out


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment of the finite p-values in `p` (NaN stays NaN): the i-th smallest
    of m becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    return _adjust(p, lambda s: np.minimum(1.0, np.maximum.accumulate((len(s) - np.arange(len(s))) * s)))


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini-Hochberg adjustment (false discovery rate) of the finite p-values; NaN stays NaN."""
    return _adjust(p, lambda s: np.minimum(1.0, np.minimum.accumulate(
        (len(s) / np.arange(1, len(s) + 1) * s)[::-1])[::-1]))


P_ADJUST = {"holm": holm, "bh": benjamini_hochberg}


def definitely_less(x: float, x_censored: bool, y: float, y_censored: bool) -> bool:
    """Is x certainly below y? A censored value '> K' is stored as its bound K: it lies above every
    observed value at or below K, and nothing is certainly below it otherwise."""
    if x_censored:
        return False
    return x < y if not y_censored else x <= y


def censored_scores(values, censored) -> np.ndarray:
    """Gehan's scores, ranks for right-censored data: for each value, how many others are certainly
    below it minus how many are certainly above it. Without censoring this is 2 * midrank - (n + 1)."""
    v, c = np.asarray(values, float), np.asarray(censored, bool)
    n = len(v)
    # less[i, j]: v_i certainly below v_j (`definitely_less`, for every pair at once)
    less = ~c[:, None] & np.where(c[None, :], v[:, None] <= v[None, :], v[:, None] < v[None, :])
    return (less.sum(axis=0) - less.sum(axis=1)).astype(float).reshape(n)  # below i, minus above i


def signed_sums(d) -> np.ndarray:
    """sum(s * d) for every one of the 2^m sign vectors s of the m values in d (bit k of the row
    index: the sign of d[k])."""
    d = np.asarray(d, float)
    signs = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)
    return signs @ d


def sign_flip_p(d, exact_max: int = 20, n_mc: int = 100_000, seed: int = 0) -> float:
    """Two-sided paired permutation test of sum(d) = 0: under no difference each pair's sign is a
    coin flip. Exact (all 2^m sign patterns of the m pairs with d != 0) for m <= exact_max, counted
    meet-in-the-middle (the 2^(m/2) sums of one half against the sorted sums of the other, so 20
    pairs cost two arrays of 1024, not a 2^20 x 20 matrix), else Monte Carlo with
    p = (1 + k) / (1 + n_mc), k the draws at least as extreme, so never 0 (the observed pattern
    counts as one draw). Pairs with d = 0 contribute nothing: the smallest possible p is 2 / 2^m
    (0.0625 for 5 nonzero pairs), m the pairs whose difference is nonzero, however many seeds
    there are."""
    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan")
    t = abs(d.sum())
    if t == 0:
        return 1.0
    d = d[d != 0]
    n = len(d)
    tol = t - 1e-9 * max(1.0, t)
    if n <= exact_max:
        first, second = signed_sums(d[: n // 2]), np.sort(signed_sums(d[n // 2:]))
        # |a + b| >= tol: b >= tol - a, or b <= -tol - a (disjoint: tol > 0)
        above = len(second) - np.searchsorted(second, tol - first, side="left")
        below = np.searchsorted(second, -tol - first, side="right")
        return float((above.sum() + below.sum()) / 2.0 ** n)
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_mc, n))
    k = int(np.sum(np.abs(signs @ d) >= tol))
    return float((1 + k) / (1 + n_mc))


def censored_median(values, censored) -> tuple[float, bool]:
    """(median, is a lower bound): censored values sort above every observed one; a median that
    touches a censored value is reported as a bound ('> value'), never as a number."""
    v, c = np.asarray(values, float), np.asarray(censored, bool)
    if len(v) == 0:
        return float("nan"), False
    order = np.lexsort((v, c))  # observed first (by value), then censored (by bound)
    n = len(v)
    mid = order[[(n - 1) // 2, n // 2]]
    return float(v[mid].mean()), bool(c[mid].any())


def paired_censored(a, a_censored, b, b_censored, seed: int = 0) -> dict:
    """Paired comparison of b against a where values may be right-censored ('> K'): per pair a win
    (b certainly below a), a loss (b certainly above) or a tie (equal, both censored, or undecidable);
    Gehan scores over the pooled 2n values, and the exact sign-flip test on their pairwise
    differences (b minus a). stat < 0: b tends to be lower."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ac, bc = np.asarray(a_censored, bool), np.asarray(b_censored, bool)
    n = len(a)
    wins = int(np.sum(~bc & np.where(ac, b <= a, b < a)))  # `definitely_less(b, a)`, every pair at once
    losses = int(np.sum(~ac & np.where(bc, a <= b, a < b)))
    scores = censored_scores(np.concatenate([a, b]), np.concatenate([ac, bc]))
    d = scores[n:] - scores[:n]
    exact = integer_sign_flip_p(d) if n else float("nan")  # Gehan differences are integers: exact at any n
    return {"wins": int(wins), "losses": int(losses), "ties": int(n - wins - losses), "stat": float(d.sum()),
            "untied": int(np.sum(d != 0)),  # the pairs the test reads: its smallest p is 2 / 2^untied
            "p": sign_flip_p(d, seed=seed) if exact is None else exact}
