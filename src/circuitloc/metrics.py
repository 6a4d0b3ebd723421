"""The paper's numbers (drop, damage, top head score, heads-to-80%) and our concentration measures."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class HeadsTo:
    """Heads-to-threshold, the one value type: `count` units reach the threshold or, `bounded`, a
    curve of `count` steps never did (the true count is more than K). Tables store count and
    bounded (`columns`); `label` is the one formatter ('K' or '> K'); statistics read `censored`
    (the bound K stays K, flagged) and never a made-up K + 1. Nothing parses a label back."""

    count: int
    bounded: bool
    n_units: int
    threshold: float = 0.8

    @classmethod
    def of_curve(cls, curve_damage, threshold: float, n_units: int) -> "HeadsTo":
        h = heads_to_threshold(curve_damage, threshold)
        return cls(int(h if h is not None else len(curve_damage)), h is None, int(n_units), float(threshold))

    @property
    def frac(self) -> float:
        """count / units (for a bounded value: its bound's fraction; read with `bounded`)."""
        return float(self.count) / float(self.n_units)

    def label(self, frac: bool = False) -> str:
        return heads_to_label(self.frac if frac else self.count, self.bounded)

    def censored(self) -> tuple[float, float, bool]:
        """(count, fraction, censored) for statistics: a bound stays its bound, flagged."""
        return float(self.count), self.frac, bool(self.bounded)

    def columns(self, name: str) -> dict:
        """{name: count, name_bounded: flag, name_frac: fraction or NaN where bounded}."""
        return {name: self.count, f"{name}_bounded": self.bounded,
                f"{name}_frac": float("nan") if self.bounded else self.frac}


def heads_to_name(threshold: float = 0.8, method: str = "ranked") -> str:
    """The column of heads-to-threshold: heads_to_{percent} (heads_to_80 at 0.8, heads_to_90 at
    0.9), `_greedy` for the greedy curve. The threshold is in the name, so a table read alone says
    which threshold it used and tables at 0.8 keep their columns."""
    pct = f"{100 * float(threshold):.10g}".replace(".", "_")
    return f"heads_to_{pct}" + ("" if method == "ranked" else f"_{method}")


def heads_to(curve_damage, threshold: float = 0.8) -> tuple[int, bool]:
    """Heads-to-threshold as (count, bounded) (`HeadsTo` without its units)."""
    h = heads_to_threshold(curve_damage, threshold)
    return (h, False) if h is not None else (len(curve_damage), True)


def heads_to_label(count, bounded: bool) -> str:
    """'K' or, bounded, '> K': the one formatter of heads-to-threshold."""
    return f"> {count:g}" if bounded else f"{count:g}"


def heads_to_censored(count, bounded: bool, n_units) -> tuple[float, float, bool]:
    """(count, fraction of units, censored) for statistics (`HeadsTo.censored`)."""
    return HeadsTo(count, bool(bounded), int(n_units)).censored()


def curve_area(curve_damage, n_units: int) -> float:
    """Threshold-free concentration: the area under the damage curve against the fraction of units
    ablated, from (0, 0) through each step (trapezoids), damage clipped to [0, 1] (the task gone is
    gone; an ablation that helps counts as no damage). A curve that stops before every unit is
    held at its last damage to fraction 1 (`curve_area_covered` says how far it ran). 1: one unit
    removes the task; about 0.5: damage grows linearly with units. Never censored, no threshold."""
    d = np.clip(np.asarray(curve_damage, float), 0.0, 1.0)
    if len(d) == 0 or not np.isfinite(d).all() or n_units <= 0:
        return float("nan")
    x = np.r_[0.0, np.arange(1, len(d) + 1) / float(n_units)]
    y = np.r_[0.0, d]
    area = float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))
    return area + max(0.0, 1.0 - x[-1]) * float(d[-1])


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


HEADS_TO = re.compile(r"^heads_to_\d+(_\d+)?(_greedy)?$")


def heads_to_measures(columns) -> list[str]:
    """The heads-to-threshold measures a table has: ranked first, then greedy when its curves had one."""
    found = [c for c in columns if HEADS_TO.match(c)]
    return sorted(found, key=lambda c: c.endswith("_greedy"))


def specificity_verdict(off_task_damage: list[float], neutral_rise: float, specific: float = 0.2,
                        general: float = 0.5, neutral_specific: float = 0.05) -> str:
    """'specific' when the unit barely touches the other tasks and plain text; 'breaks everything'
    when it removes at least half of another task or a quarter of next-token performance."""
    off = [d for d in off_task_damage if np.isfinite(d)]
    neutral_ok = not np.isfinite(neutral_rise)
    if (off and max(off) >= general) or (np.isfinite(neutral_rise) and neutral_rise >= 0.25):
        return "breaks everything" if off and min(off) >= general else "breaks other tasks"
    if all(d < specific for d in off) and (neutral_ok or neutral_rise < neutral_specific):
        return "specific"
    return "partly shared"
