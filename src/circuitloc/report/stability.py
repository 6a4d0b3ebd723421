"""How stable each sweep verdict is: the share of seed resamples under which it stays the same.

A verdict from 10-12 seed pairs near the significance threshold can flip when one seed is
swapped for another; the t-interval says how wide a mean is, not whether the verdict built from two
adjusted tests would survive another draw of seeds. So the seeds are resampled with replacement
(the same draw for every size and KV count: a pair stays a pair), the paired table is recomputed
on the resample by the same function (`paired`: tests, family adjustment, verdict), and each
row's verdict class (`verdicts.verdict_class`: yes, no, partial, mixed, none, n/a) is compared
with the one on the seeds as run. 1.0: every resample says the same; near 0.5 or below: another set
of seeds could well say something else.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc.plan.registry import parse_ablation
from circuitloc.report.verdicts import verdict_class

KEY = ("size", "kv_heads", "vs_unit")  # one paired row


def resample(pm: pl.DataFrame | None, draw) -> pl.DataFrame | None:
    """pm's rows for the drawn seeds, the j-th draw relabelled seed j (a seed drawn twice is two
    pairs; its MHA and fewer-KV toys travel together)."""
    if pm is None or len(pm) == 0:
        return pm
    parts = [pm.filter(pl.col("seed") == s).with_columns(seed=pl.lit(j, pm["seed"].dtype)) for j, s in enumerate(draw)]
    return pl.concat(parts)


def _classes(pairs: pl.DataFrame) -> dict:
    """{row key: verdict class} of a paired table."""
    return {tuple(r[k] for k in KEY): verdict_class(r["verdict"]) for r in pairs.iter_rows(named=True)}


def verdict_stability(pm, pairs, compute, n: int = 1000, seed: int = 0, layers=None) -> list[float]:
    """For each row of `pairs` (the paired table of `pm`, in order): the share of `n` seed resamples
    whose row says the same verdict class. `compute(pm, layers)`: the paired table of a resample
    (the caller's `paired` with its settings, unit and kind). A row that is missing from a
    resample (no pair left) counts as changed. NaN for a descriptive row (no verdict to keep)."""
    seeds = sorted(set(pm["seed"].to_list()))
    ref = _classes(pairs)
    rng = np.random.default_rng(seed)
    same = {k: 0 for k in ref}
    for _ in range(n):
        draw = rng.choice(seeds, size=len(seeds), replace=True).tolist()
        got = _classes(compute(resample(pm, draw), resample(layers, draw)))
        for k, c in ref.items():
            same[k] += got.get(k) == c
    return [np.nan if ref[k] == "descriptive" else same[k] / n for k in (tuple(r[c] for c in KEY)
                                                                        for r in pairs.iter_rows(named=True))]


def with_stability(pm, pairs, compute, n: int = 1000, layers=None):
    """`pairs` with `verdict_stability` beside `verdict` (`n` resamples; 0: the column holds NaN)."""
    values = verdict_stability(pm, pairs, compute, n, 0, layers) if n and len(pairs) else [np.nan] * len(pairs)
    col = pl.Series("verdict_stability", values, dtype=pl.Float64)
    at = pairs.columns.index("verdict") + 1 if "verdict" in pairs.columns else len(pairs.columns)
    return pairs.insert_column(at, col)


# 1000 resamples for the tables of the primary family's kind and units (about 50 s of one core per
# table on the capacity sweep's 36 pairs), fewer for the exploratory rest (their verdicts are
# exploratory, and there are eight times as many tables)
PRIMARY_RESAMPLES, EXPLORATORY_RESAMPLES = 1000, 200


def resamples(primary, kind: str, unit: str) -> int:
    """How many seed resamples a paired table of this ablation gets (`primary`: sweep.primary)."""
    return PRIMARY_RESAMPLES if kind in primary.kinds and unit in primary.units else EXPLORATORY_RESAMPLES


def beside_overview(out: pl.DataFrame, tables: dict) -> pl.DataFrame:
    """The overview `out` with `verdict_table_stability` after `verdict_table`: each row's
    `verdict_stability` from its paired table ({(task, ablation): table}; null where a table has
    none, e.g. one from before the column). It is the stability of the table's verdict (adjusted
    within its table); the overview's `verdict_all` adjusts over every table, so near the threshold
    the two can differ."""
    keys = ["task", "ablation", *KEY]
    parts = []
    for (task, ablation), df in tables.items():
        if "verdict_stability" not in df.columns or not len(df):
            continue
        unit = parse_ablation(ablation)[1]  # a table from before vs_unit: its own unit, as the overview reads it
        vs = pl.col("vs_unit").fill_null(unit) if "vs_unit" in df.columns else pl.lit(unit)
        parts.append(df.select("size", "kv_heads", vs.alias("vs_unit"), pl.col("verdict_stability").cast(pl.Float64))
                     .with_columns(task=pl.lit(task), ablation=pl.lit(ablation)).select(*keys, "verdict_stability"))
    if len(out) == 0:
        return out
    col = "verdict_table_stability"
    if parts:
        st = pl.concat(parts).rename({"verdict_stability": col})
        st = st.with_columns(*[pl.col(k).cast(out[k].dtype) for k in keys])
        out = out.join(st, on=keys, how="left", maintain_order="left")
    else:
        out = out.with_columns(pl.lit(None, pl.Float64).alias(col))
    cols = [c for c in out.columns if c != col]
    at = cols.index("verdict_table") + 1 if "verdict_table" in cols else len(cols)
    return out.select(cols[:at] + [col] + cols[at:])
