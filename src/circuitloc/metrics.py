"""The paper's numbers (drop, damage, top head score, heads-to-80%) and our concentration measures."""

from __future__ import annotations

import math

import numpy as np


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


def format_heads_to(value: int | None, steps: int) -> str:
    return str(value) if value is not None else f"> {steps}"


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
