"""Beyond the paper's tables: stability across input conditions, specificity of the top units,
and the MHA-vs-GQA comparison under every ablation (kind, unit)."""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import metrics
from circuitloc import stats
from circuitloc.io import frame
from circuitloc.metrics import heads_to_measures
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary import vocab
from circuitloc.plan.vocabulary.catalog import parse_ablation
from circuitloc.report.tables.localization import top_head_measure

# -- stability ---------------------------------------------------------------------------


def _mean(col: pl.Series):
    """A column's mean in the column's own float type (float32 stays float32, as scores were always
    averaged), so that near ties between units order as they did."""
    return np.mean(col.to_numpy())


def unit_drops(per_prompt: pl.DataFrame, mask, higher_is_better: bool) -> pl.DataFrame:
    """Each unit's drop on the prompts in `mask` (per-prompt artifact of a score job): columns unit, drop."""
    pp = per_prompt.filter(pl.Series(np.asarray(mask, bool)))
    units = [c for c in pp.columns if c not in ("row", "clean", "floor")]
    drops = metrics.drop(_mean(pp["clean"]), np.array([_mean(pp[u]) for u in units]), higher_is_better)
    return pl.DataFrame({"unit": units, "drop": np.asarray(drops)}, schema_overrides={"unit": pl.String})


# Resamples of each half's prompts for how often its top unit stays on top (`top_freqs`): fixed,
# so that the stability table is the same on every run of the same scores
STABILITY_BOOT = stats.Bootstrap(n=1000, seed=0)


def top_freqs(per_prompt: pl.DataFrame, mask, higher_is_better: bool, tops: tuple,
              boot: stats.Bootstrap = STABILITY_BOOT) -> dict:
    """a_top_freq / b_top_freq: the share of bootstrap resamples of the prompts in `mask` (a) and
    of the others (b) whose top unit (largest mean drop) is `tops`' unit of that half (its top unit
    on all its prompts):
    1 when the half's top unit is clear, low when another unit is as good a guess on these prompts."""
    units = [c for c in per_prompt.columns if c not in ("row", "clean", "floor")]
    d = per_prompt["clean"].to_numpy().astype(float)[:, None] - per_prompt.select(units).to_numpy().astype(float)
    d = d if higher_is_better else -d
    rng, out = np.random.default_rng(boot.seed), {}
    for name, m, top in (("a", np.asarray(mask, bool), tops[0]), ("b", ~np.asarray(mask, bool), tops[1])):
        x = d[m]
        counts = np.stack([np.bincount(rng.integers(0, len(x), len(x)), minlength=len(x)) for _ in range(boot.n)])
        picked = np.argmax(counts @ x, axis=1)  # the resample's sum of drops: the same order as its mean
        out[f"{name}_top_freq"] = float(np.mean(picked == units.index(top)))
    return out


def splits(task: str, per_prompt: pl.DataFrame, dataset: pl.DataFrame) -> list[tuple[str, str, str, np.ndarray]]:
    """(split, condition a, condition b, mask of a) over the scored prompts, from the task's spec
    (`vocab.Split`); b is ~a."""
    rows = dataset[per_prompt["row"].to_numpy()]
    out = []
    for sp in registry.task(task).splits:
        if sp.by == "column":
            out.append((sp.name, sp.a, sp.b, rows[sp.column].to_numpy() == sp.value))
        elif sp.by == "clean":
            clean = per_prompt["clean"].to_numpy()
            out.append((sp.name, sp.a, sp.b, clean <= np.median(clean)))
        elif sp.by == "length":
            length = rows["input_ids"].list.len().to_numpy()
            out.append((sp.name, f"{sp.a} (<= {int(np.median(length))})", sp.b, length <= np.median(length)))
        else:
            raise ValueError(f"task {task}: unknown split kind {sp.by!r} (column, clean or length)")
    return out


def stability_rows(task: str, model: str, attention: str, ablation: str, per_prompt: pl.DataFrame,
                   dataset: pl.DataFrame):
    """Rows of the stability table and the two conditions' unit drops (for the figure)."""
    t = registry.task(task)
    rows, maps = [], []
    for split, a, b, mask in splits(task, per_prompt, dataset):
        base = {"task": task, "model": model, "attention": attention, "ablation": ablation, "split": split,
                "condition_a": a, "condition_b": b, "n_a": int(mask.sum()), "n_b": int((~mask).sum())}
        if mask.all() or not mask.any():
            rows.append({**base, "note": "one condition is empty"})
            continue
        da, db = unit_drops(per_prompt, mask, t.higher_is_better), unit_drops(per_prompt, ~mask, t.higher_is_better)
        agree = stats.agreement(da["drop"].to_numpy(), db["drop"].to_numpy(), da["unit"].to_numpy())
        rows.append({**base, **agree, **top_freqs(per_prompt, mask, t.higher_is_better,
                                                  (agree["top_a"], agree["top_b"]))})
        maps.append((f"{model}: {split}", {a: da, b: db}))
    return rows, maps


SHARED_SPLIT = "fact set"  # the split of a task with a family-shared condition (vocab.TaskSpec.shared)


def shared_stability_row(task: str, model: str, attention: str, ablation: str, per_model: pl.DataFrame,
                         shared: pl.DataFrame):
    """A task with a family-shared condition (facts): the scores on the model's own prompts (its
    known facts) vs on those its whole family knows."""
    a = per_model.select("unit", "drop")
    b = a.select("unit").join(shared.select("unit", "drop"), on="unit", how="left", maintain_order="left")
    row = {"task": task, "model": model, "attention": attention, "ablation": ablation,
           "split": SHARED_SPLIT, "condition_a": "per-model", "condition_b": "shared",
           "n_a": int(per_model["n_prompts"][0]), "n_b": int(shared["n_prompts"][0]),
           **stats.agreement(a["drop"].to_numpy(), b["drop"].to_numpy(), a["unit"].to_numpy())}
    if metrics.estimated(per_model).any() or metrics.estimated(shared).any():  # a guided scan's tables
        row["note"] = "guided scan: some unit scores are attribution's estimates"
    return row, (f"{model}: {SHARED_SPLIT}", {"per-model": a, "shared": b})


# -- specificity -------------------------------------------------------------------------

# -- robustness --------------------------------------------------------------------------

def _side(df: pl.DataFrame) -> dict:
    """One side of a comparison: its models, mean top head score, heads-to-threshold (the greedy
    curve's `heads_to_{pct}_greedy`, the paper's measure and the sweep verdicts'; the ranked curve's
    where the run drew no greedy curve: mean count, bounded when any model's is; the fraction from
    each model's count, a bound '> K' at its K, flagged), mean curve area, MIB's CPR and CMD and
    effective units."""
    name = heads_to_measures(df.columns)[-1]  # greedy when the curves have it (it sorts last)
    h = [metrics.HeadsTo(r[name], bool(r[f"{name}_bounded"]), r["n_units"]).censored()
         for r in df.iter_rows(named=True)]
    bounded = any(b for _, _, b in h)
    tops = [top_head_measure(r) for r in df.iter_rows(named=True)]  # held out where the curves were
    top = pl.Series([r[c] for r, (c, _) in zip(df.iter_rows(named=True), tops)], dtype=pl.Float64)
    return {"models": ", ".join(df["model"]), "top_head_pct": _nanmean(top),
            "top_head_prompts": "/".join(sorted({p for _, p in tops})),
            name: _nanmean(df[name]), f"{name}_bounded": bounded,
            f"{name}_frac": float(np.mean([f for _, f, _ in h])), "bound": bounded,
            "curve_area": _nanmean(df["curve_area"]),
            # MIB's sufficiency measures (higher CPR, lower CMD: fewer units do the task); described, not in the verdict
            **{m: _nanmean(df[m]) for m in ("cpr", "cmd")},
            "effective_units": _nanmean(df["effective_units"])}


def _nanmean(col: pl.Series) -> float:
    """Mean over the values present (null and NaN skipped), NaN when there are none."""
    x = np.asarray(col.cast(pl.Float64).fill_null(np.nan).to_numpy(), float)
    return float(np.mean(x[np.isfinite(x)])) if np.isfinite(x).any() else float("nan")


def compare(mha: pl.DataFrame, gqa: pl.DataFrame) -> dict:
    """The headline comparison on one table: top head score (higher = more concentrated) and
    heads-to-80% as a fraction (lower = more concentrated); the verdict needs both to agree. Only at
    equal unit counts: an MHA model's 16 kv units (its heads) against a GQA model's 4 kv groups
    compare how the models are cut, not how concentrated they are, so that row is described only."""
    m, g = _side(mha), _side(gqa)
    counts = {side: sorted({int(n) for n in df["n_units"].to_list()}) for side, df in (("MHA", mha), ("GQA", gqa))}
    if len(counts["MHA"]) != 1 or counts["MHA"] != counts["GQA"]:
        units = ", ".join(f"{side} {'/'.join(map(str, c))}" for side, c in counts.items())
        out = {"verdict": f"descriptive: unit counts differ ({units} units), not compared (every concentration "
                          "measure depends on the unit count)"}
        for side, d in (("mha", m), ("gqa", g)):
            out.update({f"{side}_{k}": v for k, v in d.items() if k not in ("bound", "top_head_prompts")})
        out["top_head_prompts"] = "/".join(sorted({m["top_head_prompts"], g["top_head_prompts"]}))
        return out
    name = next(k for k in m if k.endswith("_frac"))  # heads_to_{pct}_frac
    s1 = np.sign(g["top_head_pct"] - m["top_head_pct"])
    diff = m[name] - g[name]  # > 0: GQA needs fewer units
    s2 = np.sign(diff)
    # a '> K' side is a lower bound: the order holds only where that side already looks larger
    if (m["bound"] and g["bound"]) or (m["bound"] and diff <= 0) or (g["bound"] and diff >= 0):
        s2 = 0
    verdict = "yes" if s1 > 0 and s2 > 0 else "no" if s1 < 0 and s2 < 0 else "mixed"
    base = name.removesuffix("_frac")
    label = (f"heads-to-{base.removeprefix('heads_to_').removesuffix('_greedy').replace('_', '.')}% "
             f"({'greedy' if base.endswith('_greedy') else 'ranked'})")  # heads-to-80% (greedy)
    why = (f"top head {'GQA' if s1 > 0 else 'MHA' if s1 < 0 else 'neither'} higher; {label} "
           f"{'GQA fewer' if s2 > 0 else 'MHA fewer' if s2 < 0 else 'undecided'}")
    out = {"verdict": f"GQA more concentrated: {verdict} ({why})"}
    for side, d in (("mha", m), ("gqa", g)):
        out.update({f"{side}_{k}": v for k, v in d.items() if k not in ("bound", "top_head_prompts")})
    out["top_head_prompts"] = "/".join(sorted({m["top_head_prompts"], g["top_head_prompts"]}))
    return out


def behaves(t1: pl.DataFrame, task: str | None = None) -> np.ndarray:
    """Per Table 1 row (a bool array): does the model show task behaviour (clean metric better than
    the task-gone floor)? From the `task_behaviour` column (empty: unknown, counted as yes), which
    Table 1 decided with the task's own floor; `task` is not needed for it."""
    v = t1["task_behaviour"]
    if v.dtype.is_float():
        v = v.fill_nan(None)
    text = v.cast(pl.String).str.to_lowercase()
    return (v.is_null() | text.is_in(["true", "1", "1.0"])).to_numpy().astype(bool)


def robustness(table1s: dict) -> pl.DataFrame:
    """table1s: {(task, ablation): Table 1}. Within every family that has both MHA and GQA members
    (a controlled pair); where no family does, all MHA models against all GQA models. A kv row takes
    an MHA model not scored under kv from the query table of the same kind (for MHA they coincide);
    a layer row needs both models scored under layer (a layer is a layer under MHA and GQA alike).
    A model without task behaviour (clean metric <= its floor, e.g. a negative IOI logit difference)
    is left out of every comparison and named in `no_task_behaviour`; one whose damage percentages
    the conditioning rule refused (Table 1 `damage_ok` false) likewise, named in `damage_na`."""
    rows = []
    for (task, ablation), t in table1s.items():
        kind, unit = parse_ablation(ablation)
        base = {"task": task, "kind": kind, "unit": unit}
        query = table1s.get((task, registry.ablation_name(kind, vocab.QUERY)))
        if unit == vocab.KV and query is not None:  # an MHA model's kv group is its query head: same scores
            extra = query.filter((pl.col("attention") == "mha") & ~pl.col("model").is_in(t["model"].to_list()))
            t = pl.concat([t, extra], how="diagonal_relaxed")
        refused = t["damage_ok"].cast(pl.String).str.to_lowercase().is_in(["false", "0"]).fill_null(False)
        t = t.with_columns(_ok=pl.Series(behaves(t)) & ~refused, _refused=refused)
        families = sorted(set(t["family"].to_list()))
        both = [f for f in families if {"mha", "gqa"} <= set(t.filter(pl.col("family") == f)["attention"])]
        groups = [(f"within {f}", t.filter(pl.col("family") == f)) for f in both] or [("across families", t)]
        for label, g in groups:
            gone = ", ".join(g.filter(~pl.col("_ok") & ~pl.col("_refused"))["model"])
            na = ", ".join(g.filter(pl.col("_refused"))["model"])
            g = g.filter(pl.col("_ok"))
            mha, gqa = g.filter(pl.col("attention") == "mha"), g.filter(pl.col("attention") == "gqa")
            if len(mha) == 0 or len(gqa) == 0:
                why = "no task behaviour on one side" if gone else "damage n/a (clean ≈ floor) on one side" if na \
                    else "needs an MHA and a GQA model"
                rows.append({**base, "comparison": label, "verdict": f"n/a: {why}", "no_task_behaviour": gone,
                             "damage_na": na})
                continue
            rows.append({**base, "comparison": label, **compare(mha, gqa), "no_task_behaviour": gone,
                         "damage_na": na})
    return frame(rows)
