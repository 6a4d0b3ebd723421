"""Does the parameter count drive a difference? The paired test the twin sizes allow.

A parameter-matched size (`match_params`) shares its MHA toys with its plain twin (the same models,
trained once), and its fewer-KV toys pair with the twin's by seed. So whether giving the lost K/V
parameters back changes the top head score is a paired question: per seed, the matched KV-k toy's
score minus the plain KV-k toy's, tested against 0 (paired t). Side-by-side intervals of the two
cells are not that test. The p-value is raw and exploratory (in no family): it answers a question
beside the verdicts.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc.report.sweep.paired import _paired_t
from circuitloc.report.sweep.summary import _floats

COLUMNS = ("twin_size", "vs_twin_top_head_pct_diff", "vs_twin_top_head_pct_diff_lo", "vs_twin_top_head_pct_diff_hi",
           "vs_twin_top_head_pct_p", "vs_twin_n_pairs")


def twins(pm: pl.DataFrame) -> dict:
    """{later size: earlier size} for sizes whose MHA toys are the same models (a parameter-matched
    size and its plain twin, in the config's order)."""
    sizes = pm["size"].unique(maintain_order=True).to_list()
    mha = {}
    for s in sizes:
        g = pm.filter(pl.col("size") == s)
        mha[s] = frozenset(g.filter(pl.col("kv_heads") == g["kv_heads"].max())["model"].to_list())
    return {b: a for i, a in enumerate(sizes) for b in sizes[i + 1:] if mha[a] and mha[a] == mha[b]}


def vs_twin(pm: pl.DataFrame, pairs: pl.DataFrame, ci: float = 0.95) -> pl.DataFrame:
    """`pairs` with COLUMNS: on a row of a matched size (same unit both sides), the paired test of
    its fewer-KV toys' top head score against its twin's, over the seeds where both are used; null
    elsewhere."""
    tw = twins(pm) if len(pm) else {}
    vals = {c: [] for c in COLUMNS}
    for r in pairs.iter_rows(named=True):
        twin = tw.get(r["size"])
        row = dict.fromkeys(COLUMNS)
        if twin is not None and r.get("vs_unit") == r.get("unit"):  # not a kv row paired with layers
            kv = pl.col("kv_heads") == r["kv_heads"]
            a = pm.filter((pl.col("size") == twin) & kv & pl.col("used")).select("seed", "top_head_pct")
            b = pm.filter((pl.col("size") == r["size"]) & kv & pl.col("used")).select("seed", "top_head_pct")
            j = b.join(a, on="seed", suffix="_twin").sort("seed")
            mean, lo, hi, p = _paired_t(_floats(j["top_head_pct"]), _floats(j["top_head_pct_twin"]), ci)
            row.update({"twin_size": twin, "vs_twin_top_head_pct_diff": mean, "vs_twin_top_head_pct_diff_lo": lo,
                        "vs_twin_top_head_pct_diff_hi": hi, "vs_twin_top_head_pct_p": p, "vs_twin_n_pairs": len(j)})
        for c in COLUMNS:
            vals[c].append(row[c])
    types = {"twin_size": pl.String, "vs_twin_n_pairs": pl.Int64}
    return pairs.with_columns(*[pl.Series(c, [np.nan if v is None and c not in types else v for v in vals[c]],
                                          dtype=types.get(c, pl.Float64)) for c in COLUMNS])
