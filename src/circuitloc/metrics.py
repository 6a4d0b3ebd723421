"""The paper's numbers (drop, damage, top head score, heads-to-80%) and our concentration measures."""

from __future__ import annotations

import math

import numpy as np
import polars as pl


def drop(clean: float, ablated, higher_is_better: bool):
    """How much the ablation hurts: metric_clean - metric_ablated (for a loss, the increase)."""
    d = np.asarray(clean) - np.asarray(ablated)
    return d if higher_is_better else -d


def damage(clean: float, ablated, floor: float, higher_is_better: bool):
    """Drop normalised so that 1.0 means the task is gone (the metric sits at its floor)."""
    span = drop(clean, floor, higher_is_better)
    if not np.isfinite(span) or abs(float(span)) < 1e-12:
        return np.full(np.shape(ablated), np.nan)
    return drop(clean, ablated, higher_is_better) / span


def heads_to_threshold(curve_damage, threshold: float = 0.8) -> int | None:
    """First step (1-based count of units ablated) whose damage reaches the threshold; None if
    the curve never gets there — the table then says '> K', never a made-up number."""
    for step, d in enumerate(curve_damage, start=1):
        if np.isfinite(d) and d >= threshold:
            return step
    return None


def heads_to(curve_damage, threshold: float = 0.8) -> tuple[int, bool]:
    """Heads-to-threshold as a number and a flag: (the first step reaching the threshold, False), or
    for a curve that never gets there (its K steps, True): bounded, the count is more than K. Tables
    store both (heads_to_80, heads_to_80_bounded); only markdown writes '> K' (`heads_to_label`)."""
    h = heads_to_threshold(curve_damage, threshold)
    return (h, False) if h is not None else (len(curve_damage), True)


def heads_to_label(count, bounded: bool) -> str:
    """'K' or, bounded, '> K'."""
    return f"> {count:g}" if bounded else f"{count:g}"


def heads_to_censored(count, bounded: bool, n_units) -> tuple[float, float, bool]:
    """(count, fraction of units, censored) for statistics: a bounded count stays its bound K with
    censored = True (the true value lies above it); no made-up number enters a mean or a test."""
    return float(count), float(count) / float(n_units), bool(bounded)


def heads_to_lower_bound(count, bounded: bool, n_units) -> tuple[float, float, bool]:
    """(count, fraction, bounded) for a comparison: a bounded '> K' becomes its least possible
    value K + 1 (flagged)."""
    k = float(count) + 1 if bounded else float(count)
    return k, k / float(n_units), bool(bounded)


# Drops below this fraction of the largest one count as no drop: a cut at exactly 0 would let float
# noise (+1e-7 on one CPU, -1e-7 on another) change the set of units the entropy sums over.
NEGLIGIBLE_DROP = 1e-6


def concentration(drops) -> dict:
    """Top unit's share of all positive drop, and the effective number of units exp(entropy),
    over the drops above NEGLIGIBLE_DROP times the largest one."""
    d = np.asarray(drops, dtype=float)
    top = d.max(initial=0.0)
    pos = np.where(d > NEGLIGIBLE_DROP * top, d, 0.0) if top > 0 else np.zeros_like(d)
    total = pos.sum()
    if total <= 0:
        return {"top_share": float("nan"), "effective_units": float("nan")}
    p = pos[pos > 0] / total
    return {"top_share": float(pos.max() / total), "effective_units": float(math.exp(-(p * np.log(p)).sum()))}


def rank(scores: pl.DataFrame) -> pl.DataFrame:
    """Units by descending single-unit drop, ties by position (layer, head); a NaN drop last. The one
    order of units: a curve ablates in it, and its first unit is every table's and job's top unit."""
    return scores.sort(pl.col("drop").fill_nan(None), "layer", "head", descending=[True, False, False],
                       nulls_last=True, maintain_order=True)


def top(scores: pl.DataFrame) -> dict:
    """The top unit's row (`rank`'s first) as a dict."""
    return rank(scores).row(0, named=True)
