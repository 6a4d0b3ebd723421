"""The sufficiency curve of one model, task and ablation (`circuitloc.sufficiency` for MIB's
conventions): at each of MIB's fractions, the top units of the ranking kept and every other unit
ablated, measured on the curve job's prompts (held out by default)."""

from __future__ import annotations

from circuitloc import sufficiency
from circuitloc.engine.ablation import Probe, as_sets


def sufficiency_curve(probe: Probe, ranked_units: list, drops=None) -> list[dict]:
    """At each fraction, the top units by |single-unit drop| kept (`sufficiency.mib_order`, MIB's
    absolute-score ranking; `drops`: the units' drops in `ranked_units`' order, None: keep that
    order). One row per fraction: `fraction`, `kept` (units kept, `sufficiency.kept_units`), `unit` (the
    last unit kept; empty when none is), the metric with every unit but the kept ones ablated, the
    same with all ablated (`{metric}_empty`) and clean (`{metric}_full`: nothing ablated), and
    `faithfulness`. Each distinct count runs once (a toy's small fractions all keep no unit)."""
    task, n = probe.task, len(ranked_units)
    if drops is not None:
        ranked_units = sufficiency.mib_order(ranked_units, drops)
    counts = [sufficiency.kept_units(f, n) for f in sufficiency.FRACTIONS]
    needed = sorted(set(counts) | {0, n})
    values = dict(zip(needed, (float(v) for v in probe.means([as_sets(ranked_units[k:]) for k in needed]))))
    full, empty = values[n], values[0]
    rows = []
    for step, (fraction, k) in enumerate(zip(sufficiency.FRACTIONS, counts), start=1):
        last = ranked_units[k - 1] if k else None
        rows.append({"method": sufficiency.METHOD, "step": step, "fraction": float(fraction), "kept": k,
                     "unit": last.label if last else None, "layer": last.layer if last else None,
                     "head": last.head if last else None, task.metric_name: values[k],
                     f"{task.metric_name}_empty": empty, f"{task.metric_name}_full": full,
                     "faithfulness": float(sufficiency.faithfulness(values[k], full, empty))})
    return rows
