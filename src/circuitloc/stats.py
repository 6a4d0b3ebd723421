"""Uncertainty over prompts (paired bootstrap) and agreement between two sets of unit scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr


def bootstrap_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n]: how often each prompt is drawn in each resample, divided by n, so that
    weights @ values is the resample's mean."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    counts = np.zeros((n_boot, n))
    np.add.at(counts, (np.arange(n_boot)[:, None], idx), 1)
    return counts / n


@dataclass(frozen=True)
class Bootstrap:
    """How prompts are resampled: `n` resamples drawn with `seed`, percentile intervals at `ci`
    (config `bootstrap:` and the run's seed)."""

    n: int
    seed: int
    ci: float = 0.95

    @classmethod
    def of(cls, block: dict | None) -> Bootstrap | None:
        """From a rule's {n, seed, ci} (None: no intervals)."""
        return cls(int(block["n"]), int(block["seed"]), float(block.get("ci", 0.95))) if block else None


def drop_intervals(clean, ablated, higher_is_better: bool, boot: Bootstrap, floor=None) -> dict:
    """Percentile intervals of each unit's drop, resampling prompts (the same draw for the clean and
    every ablated run: paired), and how often each unit is the top unit across resamples.
    clean: [N] per-prompt clean metric; ablated: [U, N] per-prompt metric with unit u ablated.
    With `floor` (the metric when the task is gone: a number, or [N] per prompt), also the interval
    of the damage drop / (clean - floor), a ratio whose numerator and denominator come from the same
    resample (a fixed denominator would understate its width)."""
    n_boot, seed, ci = boot.n, boot.seed, boot.ci
    clean, ablated = np.asarray(clean, float), np.atleast_2d(np.asarray(ablated, float))
    per_prompt = clean[None, :] - ablated
    if not higher_is_better:
        per_prompt = -per_prompt
    w = bootstrap_weights(clean.shape[0], n_boot, seed)
    boots = w @ per_prompt.T  # [B, U]
    alpha = (1 - ci) / 2
    top = np.bincount(boots.argmax(axis=1), minlength=ablated.shape[0]) / n_boot
    out = {"lo": np.quantile(boots, alpha, axis=0), "hi": np.quantile(boots, 1 - alpha, axis=0), "top_freq": top}
    if floor is not None:
        span_pp = clean - np.broadcast_to(np.asarray(floor, float), clean.shape)
        span = w @ (span_pp if higher_is_better else -span_pp)  # [B]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(np.abs(span)[:, None] > 1e-12, boots / span[:, None], np.nan)
        ok = np.isfinite(ratio).any(axis=0)
        lo, hi = np.full(ratio.shape[1], np.nan), np.full(ratio.shape[1], np.nan)
        if ok.any():
            lo[ok] = np.nanquantile(ratio[:, ok], alpha, axis=0)
            hi[ok] = np.nanquantile(ratio[:, ok], 1 - alpha, axis=0)
        out["damage_lo"], out["damage_hi"] = lo, hi
    return out


def span_interval(clean, floor, higher_is_better: bool, boot: Bootstrap) -> tuple:
    """Percentile interval of mean(clean - floor) over prompts (for a loss, floor - clean): how
    clearly the clean metric stands above the metric with the task gone, the denominator of every
    damage ratio. `floor`: a number or one value per prompt, resampled with the prompts."""
    n_boot, seed, ci = boot.n, boot.seed, boot.ci
    clean = np.asarray(clean, float)
    span = clean - np.broadcast_to(np.asarray(floor, float), clean.shape)
    span = span if higher_is_better else -span
    if len(span) == 0:
        return float("nan"), float("nan")
    boots = bootstrap_weights(len(span), n_boot, seed) @ span
    alpha = (1 - ci) / 2
    return float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))


def agreement(a, b, labels, k: int = 5) -> dict:
    """Do two conditions pick the same units? Top unit equal, Spearman of the scores, top-k overlap."""
    a, b, labels = np.asarray(a, float), np.asarray(b, float), np.asarray(labels)
    top_a, top_b = labels[np.argmax(a)], labels[np.argmax(b)]
    k = min(k, len(labels))
    set_a, set_b = set(labels[np.argsort(-a, kind="stable")[:k]]), set(labels[np.argsort(-b, kind="stable")[:k]])
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
    less = np.array([[definitely_less(v[i], c[i], v[j], c[j]) for j in range(n)] for i in range(n)],
                    bool).reshape(n, n)  # n = 0: a comparison without a usable pair has no scores
    return (less.sum(axis=0) - less.sum(axis=1)).astype(float)  # below i, minus above i


def sign_flip_p(d, exact_max: int = 16, n_mc: int = 100_000, seed: int = 0) -> float:
    """Two-sided paired permutation test of sum(d) = 0: under no difference each pair's sign is a
    coin flip. Exact (all 2^m sign patterns of the m pairs with d != 0) for m <= exact_max, else
    Monte Carlo with p = (1 + k) / (1 + n_mc), k the draws at least as extreme, so never 0 (the
    observed pattern counts as one draw). Pairs with d = 0 contribute nothing: the smallest possible
    p is 2 / 2^m (0.0625 for 5 nonzero pairs), m the pairs whose difference is nonzero, however many
    seeds there are."""
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
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
        return float(np.mean(np.abs(signs @ d) >= tol))
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
    wins = sum(definitely_less(b[i], bc[i], a[i], ac[i]) for i in range(n))
    losses = sum(definitely_less(a[i], ac[i], b[i], bc[i]) for i in range(n))
    scores = censored_scores(np.r_[a, b], np.r_[ac, bc])
    d = scores[n:] - scores[:n]
    return {"wins": int(wins), "losses": int(losses), "ties": int(n - wins - losses), "stat": float(d.sum()),
            "p": sign_flip_p(d, seed=seed) if n else float("nan")}
