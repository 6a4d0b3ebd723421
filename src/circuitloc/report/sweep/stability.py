"""How stable each sweep verdict is: the share of seed resamples that give the same verdict.

A verdict from a few seed pairs near the significance threshold can flip when one seed is swapped
for another; the t-interval says how wide a mean is, not whether the verdict built from two adjusted
tests would survive another draw of seeds. So the seeds are resampled with replacement (one draw
for every size, KV count and task: a pair stays a pair, and a seed's toys travel together across
tasks), the tables are recomputed on the resample by the same functions (`paired`: tests, family
adjustment, verdict; for the overview's `verdict_all`, every table at once and `verdicts.overview`'s
adjustment over all of them), and each row's verdict is compared with the one on the seeds as run,
measure and direction included (`verdicts.verdict_key`: a "partial" on the top head saying more
concentrated is not one on heads-to saying less).

It is what it says, the share of seed resamples that give the same verdict, and not the chance that
a fresh set of seeds would: bench/stability_calibration.py measures how the two relate on simulated
sweeps (docs/method.md quotes it).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc.plan.vocabulary.catalog import parse_ablation
from circuitloc.report.sweep.paired import paired
from circuitloc.report.sweep.summary import DESCRIPTIVE, PRIMARY
from circuitloc.report.sweep.verdicts import overview, verdict_key

KEY = ("size", "kv_heads", "vs_unit")  # one paired row


def resample(pm: pl.DataFrame | None, draw) -> pl.DataFrame | None:
    """pm's rows for the drawn seeds, the j-th draw relabelled seed j (a seed drawn twice is two
    pairs; its MHA and fewer-KV toys travel together)."""
    if pm is None or len(pm) == 0:
        return pm
    parts = [pm.filter(pl.col("seed") == s).with_columns(seed=pl.lit(j, pm["seed"].dtype)) for j, s in enumerate(draw)]
    return pl.concat(parts)


def _classes(pairs: pl.DataFrame) -> dict:
    """{row key: verdict key (class, measure and direction)} of a paired table."""
    return {tuple(r[k] for k in KEY): verdict_key(r["verdict"]) for r in pairs.iter_rows(named=True)}


def verdict_stability(pm, pairs, compute, n: int = 1000, seed: int = 0, layers=None) -> list[float]:
    """For each row of `pairs` (the paired table of `pm`, in order): the share of `n` seed resamples
    whose row says the same verdict (`verdict_key`). `compute(pm, layers)`: the paired table of a resample
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
    return [np.nan if ref[k] == DESCRIPTIVE else same[k] / n for k in (tuple(r[c] for c in KEY)
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


def overview_stability(data: dict, ov: pl.DataFrame, st, n_primary: int = PRIMARY_RESAMPLES,
                       n_other: int = EXPLORATORY_RESAMPLES, seed: int = 0) -> list[float]:
    """For each row of the overview `ov`: the share of seed resamples whose `verdict_all` is the same
    (`verdict_key`). `data`: {(task, ablation): (per-model rows, layer rows or None)} of every table
    of the overview. One draw of the seeds serves every table (a seed's toys travel together across
    tasks, sizes and units); each table's paired test is recomputed (`paired`) and the overview's
    adjustment redone over all of them (`verdicts.overview`). A primary verdict reads only the primary
    family, so its `n_primary` resamples recompute only the primary kind's and units' tables; every
    other verdict gets `n_other` resamples of every table. A row missing from a resample counts as
    changed; NaN for a descriptive row."""
    rows = list(ov.iter_rows(named=True))
    key = lambda r: tuple(str(r[k]) for k in ("task", "ablation", *KEY))  # noqa: E731  (CSV or frame alike)
    ref = {key(r): verdict_key(r["verdict_all"]) for r in rows}
    primary = {key(r) for r in rows if r.get("verdict_family") == PRIMARY}
    wanted = {k: n_primary if k in primary else n_other for k in ref}
    first = {t for t in data if parse_ablation(t[1])[0] in st.primary.kinds and parse_ablation(t[1])[1] in st.primary.units}
    seeds = sorted(set().union(*[set(pm["seed"].to_list()) for pm, _ in data.values()]))
    rng = np.random.default_rng(seed)
    same = dict.fromkeys(ref, 0)
    for i in range(max(wanted.values(), default=0)):
        draw = rng.choice(seeds, size=len(seeds), replace=True).tolist()
        tables = {t: paired(resample(pm, draw), st, parse_ablation(t[1])[1], resample(lay, draw), parse_ablation(t[1])[0])
                  for t, (pm, lay) in data.items() if i < n_other or t in first}
        got = {key(r): verdict_key(r["verdict_all"]) for r in overview(tables, st, by_kind=False).iter_rows(named=True)}
        for k in ref:
            same[k] += i < wanted[k] and got.get(k) == ref[k]
    return [np.nan if ref[key(r)] == DESCRIPTIVE or not wanted[key(r)] else same[key(r)] / wanted[key(r)]
            for r in rows]


def beside_overview(out: pl.DataFrame, tables: dict, data: dict | None = None, st=None,
                    n: tuple[int, int] = (PRIMARY_RESAMPLES, EXPLORATORY_RESAMPLES)) -> pl.DataFrame:
    """The overview `out` with `verdict_table_stability` after `verdict_table` (each row's
    `verdict_stability` from its paired table, {(task, ablation): table}: the stability of the
    table's own verdict, adjusted within its table) and `verdict_all_stability` after `verdict_all`
    (`overview_stability`: the verdict the overview reads, resampled jointly over every table; null
    when `data`, the per-model rows of every table, is not given or misses a table)."""
    out = _table_stability(out, tables)
    if len(out) == 0:
        return out
    ok = data is not None and st is not None and set(tables) <= set(data)
    values = overview_stability(data, out, st, *n) if ok else [None] * len(out)
    col = pl.Series("verdict_all_stability", values, dtype=pl.Float64)
    return out.insert_column(out.columns.index("verdict_all") + 1, col)


def _table_stability(out: pl.DataFrame, tables: dict) -> pl.DataFrame:
    """`verdict_table_stability` after `verdict_table` (`beside_overview`)."""
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
