"""What the controlled experiment's seeds say together: `summarize` turns the sweep toys' Table 1
rows into means and intervals across seeds, `paired` into paired comparisons against the MHA model
of the same seed and size, `overview` into one verdict per comparison. The toys themselves come
from circuitloc.plan.config.sweep_toys.

Two rules keep a verdict meaning what it says. Comparisons only at equal unit counts:
every concentration measure (top unit, heads-to as a fraction, curve area, CPR and CMD, effective units) depends
on how many units a model is cut into, so a KV-1 toy's 2 kv groups against the MHA toy's 16 heads
is described, never tested (`comparison`); where the KV-1 toy's groups are its layers, its rows are
paired with the MHA toy's layer rows instead (`vs_unit`). Families: the tests the config declares
primary (`sweep.primary`: units and measures, every task) are adjusted on their own, every other
test as a second, exploratory family (`{measure}_family`)."""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import metrics
from circuitloc import stats
from circuitloc.io import frame
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.metrics import heads_to_measures
from circuitloc.report.tables.analysis import behaves
from circuitloc.report.records import SWEEP_MEASURES, Primary, SweepStats  # noqa: F401  (the sweep's settings)
from circuitloc.report.tables.localization import top_head_measure

MEASURES = SWEEP_MEASURES
PRIMARY, EXPLORATORY, DESCRIPTIVE = "primary", "exploratory", "descriptive"
TESTED = "tested"


def _interval(x, ci: float):
    """Mean and a t-interval across seeds (NaN bounds for a single seed). Never given a censored
    value: the callers pass uncensored measures only."""
    import scipy.stats

    x = np.asarray(x, float)
    m = float(np.mean(x)) if len(x) else np.nan
    if len(x) < 2:
        return m, np.nan, np.nan
    half = scipy.stats.t.ppf(0.5 + ci / 2, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - half, m + half


def per_model(table1, meta: dict, passed: dict, task: str):
    """One row per sweep model of a Table 1 and cell (a model that stands for two cells, its meta's
    `also`, gets a row in each): its size, KV heads, seed, whether it passed its checks
    (`accepted`), shows task behaviour (clean metric better than its floor; e.g. IOI logit
    difference > 0) and may report damage percentages (`damage_ok`: the conditioning rule,
    `tables.damage_condition`), its clean metric and measures. `used`: all three. A bounded ('> K')
    heads-to-threshold is kept as its bound K with `{measure}_censored` = True; the measure and its
    _frac hold observed values only (NaN for a censored curve). `top_head_prompts` says whether the
    top unit's score is held out or, where the curves ran on all prompts, in-sample (`scoring`)."""
    clean_col = next((c for c in table1.columns if c.startswith("baseline_")), None)
    ok = behaves(table1, task)
    rows = []
    for i, r in enumerate(table1.iter_rows(named=True)):
        if r["model"] not in meta:
            continue
        h80 = {}
        for base in heads_to_measures(table1.columns):  # ranked, and greedy where the curves have it
            if r[base] is None:  # refused by the conditioning rule: no value, no bound
                h80.update({base: np.nan, f"{base}_frac": np.nan, f"{base}_censored": False,
                            f"{base}_bound": np.nan, f"{base}_frac_bound": np.nan})
                continue
            count, frac, censored = metrics.HeadsTo(r[base], bool(r[f"{base}_bounded"]), r["n_units"]).censored()
            h80.update({base: np.nan if censored else count, f"{base}_frac": np.nan if censored else frac,
                        f"{base}_censored": censored, f"{base}_bound": count if censored else np.nan,
                        f"{base}_frac_bound": frac if censored else np.nan})
        top, top_prompts = top_head_measure(r)  # held out where the curves were
        damage_ok = r.get("damage_ok")
        row = {"model": r["model"], "accepted": bool(passed.get(r["model"], True)),
               "task_behaviour": bool(ok[i]),
               "damage_ok": True if damage_ok is None else str(damage_ok).lower() in ("true", "1"),
               "clean_metric": clean_col.removeprefix("baseline_") if clean_col else "",
               "clean": _num(r[clean_col]) if clean_col else np.nan,
               # capped at 100 for a capped task (facts, `metrics.capped_pct`): past the task gone is overshoot
               **{f"top_head_pct{s}": metrics.capped_pct(_num(r.get(f"{top}{s}")), registry.task(task).capped)
                  for s in ("", "_lo", "_hi")},
               "top_head_prompts": top_prompts,
               "curve_area": _num(r.get("curve_area")),
               "rescaled_curve_area": _num(metrics.rescaled_curve_area(_num(r.get("curve_area")), r["n_units"])),
               "cpr": _num(r.get("cpr")), "cmd": _num(r.get("cmd")),  # MIB's sufficiency measures
               **h80,
               "effective_units": _num(r["effective_units"]), "top_share": _num(r["top_share"]),
               "n_units": int(r["n_units"])}
        cell = {k: v for k, v in meta[r["model"]].items() if k != "also"}
        for size in [cell["size"], *meta[r["model"]].get("also", [])]:  # a toy that stands for two cells
            rows.append({**cell, "size": size, **row})
    pm = frame(rows)
    if len(pm):
        pm = pm.with_columns(used=pl.col("accepted") & pl.col("task_behaviour") & pl.col("damage_ok"))
    return pm


def _num(v) -> float:
    """A table cell as a float: empty (null) is NaN."""
    return float("nan") if v is None else float(v)


# uncensored: mean and t-interval across seeds (curve_area: threshold-free, never censored)
METRICS = ("top_head_pct", "curve_area", "rescaled_curve_area", "cpr", "cmd", "top_share", "effective_units")
# heads-to-threshold on the ranked curve and on the greedy curve (the paper's), named from the
# configured threshold (heads_to_80, heads_to_90_greedy, ...): may be '> K', so a median (or bound)
# and a censored count, never a mean over made-up values
def _values(g, m):
    """(value or bound, censored) of a censorable measure (a count or its _frac), one per row of g."""

    censored = g[f"{m.removesuffix('_frac')}_censored"].to_numpy().astype(bool)
    v = np.where(censored, _floats(g[f"{m}_bound"]), _floats(g[m]))
    return v, censored


def _floats(col):
    """A column as a float array, null as NaN."""

    return np.asarray(col.cast(float).to_numpy(), float)


def _describe(g, ci: float, prefix: str = "") -> dict:
    """Mean and t-interval of the clean metric and uncensored measures over the rows of g; for
    heads-to-80% the censored count, and the mean and t-interval only when nothing is censored,
    else NaN (the median, flagged when it is a lower bound, is given either way)."""


    row = {}
    for m in ("clean",) + METRICS:
        if m not in g.columns:  # rows from before the measure existed
            continue
        x = _floats(g[m])
        row[f"{prefix}{m}"], row[f"{prefix}{m}_lo"], row[f"{prefix}{m}_hi"] = _interval(x[np.isfinite(x)], ci)
    for base in heads_to_measures(g.columns):
        censored = int(g[f"{base}_censored"].sum())
        row[f"{prefix}{base}_censored"] = censored
        for m in (base, f"{base}_frac"):
            if censored:
                row[f"{prefix}{m}"] = row[f"{prefix}{m}_lo"] = row[f"{prefix}{m}_hi"] = np.nan
            else:
                row[f"{prefix}{m}"], row[f"{prefix}{m}_lo"], row[f"{prefix}{m}_hi"] = _interval(_floats(g[m]), ci)
            med, bound = stats.censored_median(*_values(g, m))
            row[f"{prefix}{m}_median"], row[f"{prefix}{m}_median_is_bound"] = med, bound
    return row


def _mha_kv(g) -> int:
    return int(g["kv_heads"].max())


def _pair_seeds(g, kv, mha_kv) -> list:
    """Seeds where the model with `kv` KV heads and the MHA model both passed their checks and show
    task behaviour (for the MHA row itself: where it does)."""

    ok = lambda k: set(g.filter((pl.col("kv_heads") == k) & pl.col("used"))["seed"].to_list())  # noqa: E731
    return sorted(ok(kv) & ok(mha_kv))


def _row_seeds(g, kv, mha_kv) -> list:
    """The seeds of a summary row: for a fewer-KV count, its paired seeds; for MHA, the seeds that
    enter at least one paired comparison (an MHA toy whose every partner failed describes no pair)."""
    if kv != mha_kv:
        return _pair_seeds(g, kv, mha_kv)
    others = [int(k) for k in g["kv_heads"].unique().to_list() if int(k) != mha_kv]
    return sorted(set().union(*[_pair_seeds(g, k, mha_kv) for k in others])) if others else \
        _pair_seeds(g, kv, mha_kv)


def summarize(pm, ci: float = 0.95):
    """Per size and KV-head count: mean and interval across seeds, over the seeds that enter this
    KV-head count's paired comparison with MHA (both passed their checks and show task behaviour),
    so a row and its paired test describe the same toys; the MHA row over the seeds of its pairs
    (`_row_seeds`). Counted, not used: toys that failed their
    checks (excluded_seeds) and toys without task behaviour (no_behaviour_seeds)."""


    rows = []
    for (size,), gs in pm.group_by("size", maintain_order=True):
        mha_kv = _mha_kv(gs)
        for (kv,), g in gs.group_by("kv_heads", maintain_order=True):
            seeds = _row_seeds(gs, int(kv), mha_kv)
            used = g.filter(pl.col("seed").is_in(seeds))
            row = {"size": size, "kv_heads": int(kv), "n_seeds": len(seeds), "seeds": " ".join(map(str, seeds)),
                   "excluded_seeds": int((~g["accepted"]).sum()),
                   "no_behaviour_seeds": int((g["accepted"] & ~g["task_behaviour"]).sum()),
                   "n_units": int(g["n_units"][0]), "clean_metric": g["clean_metric"][0],
                   **_describe(used, ci)}
            rows.append(row)
    return frame(rows).sort(["size", "kv_heads"], descending=[False, True], maintain_order=True)
