"""Sufficiency, MIB's direction beside our necessity curves: keep the top units of the ranking,
ablate every other unit, and ask how much of the task the kept circuit still does.

Conventions, as MIB's circuit track computes them (`MIB_circuit_track/evaluation.py`,
`evaluate_area_under_curve`, in hannamw/MIB-circuit-track):

- fractions (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1) of the scored components, each turned
  into a count with Python's `int(fraction * n)`: truncation toward zero, so a fraction below 1/n
  keeps no unit (its circuit is the empty one and its faithfulness is 0 by definition);
- the kept units are the top ones by the absolute value of their score (MIB keeps the components
  with the largest |score|): a unit whose ablation raises the metric (a negative drop) matters to
  the circuit as much as one that lowers it by the same amount, so ours keeps units by |single-unit
  drop| (`mib_order`), not by the signed drop that orders the necessity curves;
- faithfulness f = (m(C) - m(empty)) / (m(M) - m(empty)): m(M) the clean model, m(empty) every unit
  ablated, m(C) only the kept units un-ablated. The ratio is the same for a metric where lower is
  better (a loss): m(C) = m(M) gives 1 and m(C) = m(empty) gives 0 whichever way the metric points;
- CPR = trapezoid area of f over the fractions themselves (linear x, MIB's default log_scale=False),
  CMD = trapezoid area of |1 - f|, both over the ten points only: no point at fraction 0, so the x
  range is 0.999 and a circuit with f = 1 at every fraction has CPR 0.999, CMD 0.

Where ours differs from MIB's: MIB's components are nodes or edges of the whole graph (MLPs,
attention heads, input); ours are the ablation's units only (query heads, kv groups or layers of
attention), every MLP kept, as MIB keeps a node that carries no score. With few units (a toy's 16
heads) most small fractions keep no unit, so the curve starts with zeros by construction.
Standard library and numpy only: the engine writes these rows, the report reads them."""

from __future__ import annotations

import numpy as np

FRACTIONS = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)
METHOD = "sufficiency"  # the `method` value of these rows in a curve table
COUNT_RULE = "int(fraction * n_units): truncated toward zero, as MIB's evaluation.py"


def kept_units(fraction: float, n_units: int) -> int:
    """How many top units a fraction keeps: MIB's `int(pct * n_scored_items)`, the same float product
    (so 0.5 of 5 units keeps 2, 0.001 of 16 keeps none)."""
    return int(fraction * n_units)


def mib_order(units: list, drops) -> list:
    """`units` (given in the necessity ranking: signed drop, descending) reordered by |drop|,
    largest first, as MIB ranks components by absolute score; ties keep the given order; a unit
    whose drop is NaN (no score) comes last, never kept before a scored one."""
    d = np.abs(np.asarray(drops, float))
    key = np.where(np.isnan(d), -np.inf, d)  # after the absolute value: NaN last, not first
    return [units[i] for i in np.argsort(-key, kind="stable")]


def faithfulness(circuit, model: float, empty: float):
    """(m(C) - m(empty)) / (m(M) - m(empty)); NaN where the model and the empty circuit score the
    same (no task to keep). Orientation-free: a loss gives 1 at m(M) and 0 at m(empty) as well."""
    span = float(model) - float(empty)
    c = np.asarray(circuit, float)
    if span == 0 or not np.isfinite(span):
        return np.full(c.shape, np.nan) if c.shape else float("nan")
    f = (c - float(empty)) / span
    return f if f.shape else float(f)


def cpr_cmd(faith, fractions=FRACTIONS) -> tuple[float, float]:
    """(CPR, CMD): trapezoid areas of f and of |1 - f| against the fractions, pairwise over
    consecutive points as MIB sums them; NaN when any f is missing."""
    f = np.asarray(faith, float)
    x = np.asarray(fractions, float)
    if len(f) != len(x):
        raise ValueError(f"{len(f)} faithfulness values for {len(x)} fractions")
    if len(f) < 2 or not np.isfinite(f).all():
        return float("nan"), float("nan")
    dx = np.diff(x)
    cpr = float(np.sum(dx * (f[1:] + f[:-1]) / 2))
    gap = np.abs(1.0 - f)
    cmd = float(np.sum(dx * (gap[1:] + gap[:-1]) / 2))
    return cpr, cmd
