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


# Damage of 1 is the task gone (the metric at its floor); beyond it is overshoot (facts' margin
# pushed past the wrong answers), not more concentration. In the sweep's paired tests such a task's
# damage (its spec says `capped`) enters capped at 1, so a top head at 203% counts as one that
# removes the task (100%).
def capped_pct(pct: float, capped: bool) -> float:
    """A damage percentage as the sweep's tests read it: at most 100 where the task's spec is `capped`."""
    return min(pct, 100.0) if capped and pct == pct else pct


# The paper's curve threshold (80% damage), the one place it is written in the code: the run's value is
# config curves.threshold (config/config.yaml, a test checks the two agree), which every table, figure
# and claims job is passed; this is for callers outside a run (tests, notebooks).
DEFAULT_THRESHOLD = 0.8


def heads_to_threshold(curve_damage, threshold: float) -> int | None:
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
    threshold: float | None = None  # None: read back from a table (its column's name carries the threshold)

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


def heads_to_name(threshold: float, method: str = "ranked") -> str:
    """The column of heads-to-threshold: heads_to_{percent} (heads_to_80 at 0.8, heads_to_90 at
    0.9), `_greedy` for the greedy curve. The threshold is in the name, so a table read alone says
    which threshold it used and tables at 0.8 keep their columns."""
    if threshold is None:
        raise ValueError("heads-to-threshold needs the run's threshold (config curves.threshold); none was passed")
    pct = f"{100 * float(threshold):.10g}".replace(".", "_")
    return f"heads_to_{pct}" + ("" if method == "ranked" else f"_{method}")


def heads_to_label(count, bounded: bool) -> str:
    """'K' or, bounded, '> K': the one formatter of heads-to-threshold."""
    return f"> {count:g}" if bounded else f"{count:g}"


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


def rescaled_curve_area(area, n_units):
    """The curve area on one scale for every unit count: (A - 1/2K) / (1 - 1/K), K units. The raw
    area of K units lies between 1/2K (only the last unit does anything) and 1 - 1/2K (one unit
    removes the task), so a 2-unit model scores <= 0.75 by construction; rescaled, one unit
    removing the task is 1, damage growing linearly with units 0.5, all of it in the last unit 0.
    NaN for one unit (K = 1: no curve to speak of) or a NaN area. Still a function of K beyond its
    range (a 2-unit curve has one free step): compare only at equal unit counts."""
    a, k = np.asarray(area, float), np.asarray(n_units, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(k > 1, (a - 1 / (2 * k)) / (1 - 1 / k), np.nan)
    return float(out) if out.ndim == 0 else out


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
    order of units: a curve ablates in it, and its first unit is every table's and job's top unit.
    A guided scan's table (`estimated`, `drop_bound`: engine.guided_scan) ranks an estimated unit by
    the lower of its estimate and its bound, which its scan stopped below the top units scored
    exactly, so those come first whatever the estimates; a table without the columns is all exact."""
    key = pl.col("drop")
    if "estimated" in scores.columns and "drop_bound" in scores.columns:
        key = pl.when(pl.col("estimated")).then(pl.min_horizontal("drop", "drop_bound")).otherwise(key)
    return scores.sort(key.fill_nan(None), "layer", "head", descending=[True, False, False],
                       nulls_last=True, maintain_order=True)


def estimated(scores: pl.DataFrame) -> np.ndarray:
    """Which rows of a scores table hold an estimate, not an exact drop (a guided scan's
    `estimated` column, engine.guided_scan); a table without it (the exact scan's) is all exact."""
    if "estimated" not in scores.columns:
        return np.zeros(len(scores), bool)
    return scores["estimated"].fill_null(False).to_numpy().astype(bool)


def top(scores: pl.DataFrame) -> dict:
    """The top unit's row (`rank`'s first) as a dict."""
    return rank(scores).row(0, named=True)


HEADS_TO = re.compile(r"^heads_to_\d+(_\d+)?(_greedy)?$")


def heads_to_measures(columns) -> list[str]:
    """The heads-to-threshold measures a table has: ranked first, then greedy when its curves had one."""
    found = [c for c in columns if HEADS_TO.match(c)]
    return sorted(found, key=lambda c: c.endswith("_greedy"))


# The negative control of Table 2: single random units other than the top unit. A model with at
# least CONTROL_MIN_LAYERS layers draws them from its middle third of layers (away from the embedding
# and unembedding ends); a shallower one from every layer (the middle third of a 2-layer toy is
# layer 0, often the top unit's own layer: a control that is no control).
CONTROL_MIN_LAYERS = 6


def control_layers(n_layers: int) -> tuple[int, int]:
    """[lo, hi): the layers Table 2's random control units are drawn from (`CONTROL_MIN_LAYERS`)."""
    n = int(n_layers)
    if n < CONTROL_MIN_LAYERS:
        return 0, n
    return n // 3, max(n // 3 + 1, (2 * n) // 3)


def control_rule(n_layers: int) -> str:
    """The control's rule as Table 2 states it (column `control_rule`)."""
    lo, hi = control_layers(n_layers)
    if int(n_layers) < CONTROL_MIN_LAYERS:
        return f"any non-top unit, all {int(n_layers)} layers (fewer than {CONTROL_MIN_LAYERS}), on the curve prompts"
    return f"non-top units of layers {lo}-{hi - 1} (middle third of {int(n_layers)}), on the curve prompts"


def _at_least(value, cut: float, interval=None):
    """Is value >= cut? True / False, or None when the interval (lo, hi) straddles the cut (a point
    value without an interval is its own interval)."""
    lo, hi = (value, value) if interval is None else interval
    if not (np.isfinite(lo) and np.isfinite(hi)):
        lo = hi = value
    if lo >= cut:
        return True
    if hi < cut:
        return False
    return None


def specificity_verdict(off_task_damage: list[float], neutral_rise: float, specific: float = 0.2,
                        general: float = 0.5, neutral_specific: float = 0.05, intervals=None) -> str:
    """'specific' when the unit barely touches the other tasks and plain text; 'breaks everything'
    when it removes at least half of every other task, 'breaks other tasks' when half of one or a
    quarter of next-token performance; else 'partly shared'. `intervals`: (off-task intervals
    [(lo, hi)] in the order of off_task_damage, neutral-rise interval (lo, hi)); with them a
    comparison with a cut is decided only when the interval lies on one side of it, and a verdict
    that hangs on an undecided one is 'unclear (a or b)', naming the verdicts it could be (a
    damage of 0.5084 against the 0.5 cut, with an interval 0.2 wide, decides nothing). With no
    other task measured, 'specific' is NOT_TESTABLE."""
    pairs = [(d, None if intervals is None else intervals[0][i]) for i, d in enumerate(off_task_damage)]
    off = [(d, iv) for d, iv in pairs if np.isfinite(d)]
    rise_iv = None if intervals is None else intervals[1]
    tests = [(d, general, iv) for d, iv in off] + [(d, specific, iv) for d, iv in off]
    if np.isfinite(neutral_rise):
        tests += [(neutral_rise, 0.25, rise_iv), (neutral_rise, neutral_specific, rise_iv)]
    known = [_at_least(v, cut, iv) for v, cut, iv in tests]
    open_ = [i for i, k in enumerate(known) if k is None]
    verdicts = []
    for bits in range(2 ** len(open_)):  # every way the undecided comparisons could come out
        k = list(known)
        for j, i in enumerate(open_):
            k[i] = bool((bits >> j) & 1)
        v = _specificity_of(k, len(off), np.isfinite(neutral_rise))
        v = NOT_TESTABLE if v == "specific" and not off else v  # a run of one task: no other task measured
        if v not in verdicts:
            verdicts.append(v)
    verdicts.sort(key=lambda v: SPECIFICITY_ORDER.index("specific" if v == NOT_TESTABLE else v))
    return verdicts[0] if len(verdicts) == 1 else f"unclear ({' or '.join(verdicts)})"


SPECIFICITY_ORDER = ("specific", "partly shared", "breaks other tasks", "breaks everything")
# no other task measured (a run of one task): a unit that leaves plain text alone was not tested on
# other tasks, not found specific to its own; one that harms plain text still says so
NOT_TESTABLE = "not testable (no other task measured)"


def _specificity_of(k: list, n_off: int, has_neutral: bool) -> str:
    """The verdict from decided comparisons, in `specificity_verdict`'s order: per off-task damage
    >= general, then per off-task damage >= specific, then neutral >= 0.25 and >= neutral_specific."""
    general, specific = k[:n_off], k[n_off:2 * n_off]
    neutral_breaks, neutral_touched = (k[2 * n_off], k[2 * n_off + 1]) if has_neutral else (False, False)
    if any(general) or neutral_breaks:
        return "breaks everything" if general and all(general) else "breaks other tasks"
    if not any(specific) and not neutral_touched:
        return "specific"
    return "partly shared"
