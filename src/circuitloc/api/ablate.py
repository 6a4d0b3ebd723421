"""Ablations you choose (`Run.ablate`, `Run.per_prompt`): a unit or a set of units ablated together
on a task's prompts, measured with the task's metric or your own (`Metric`, any function of the
last position's logits), with the drop, the damage and their bootstrap intervals over the prompts
as the score jobs compute them (`stats.drop_intervals`, the run's bootstrap settings), so that one
unit's row equals that unit's row of the scores table. Also each head's attention pattern
(TransformerLens' `blocks.{l}.attn.hook_pattern`, `attention`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import polars as pl
import torch

from circuitloc import metrics, stats
from circuitloc.engine import ablation
from circuitloc.engine.job import AblationJob

# which of a task's prompts an ablation runs on: the scoring prompts (those that rank the units, as
# the scores table), the held-out ones (as the curves) or every prompt
PROMPTS = ("scoring", "heldout", "all")
ONE_PROMPT = "one prompt: no interval over prompts (a bootstrap needs 2 or more prompts)"
NO_SPREAD = "no spread: every prompt gives the same drop, so the interval is that one value"


@dataclass(frozen=True)
class Metric:
    """Your own metric: `fn(logits, fields)` -> one value per prompt, where `logits` is [prompts,
    vocabulary] at each prompt's last position and `fields` the task's per-prompt token ids
    ({"io_id": ..., "s_id": ...} for IOI and your own prompts, "b_id" for induction, "answer_id" for
    facts; each a tensor of one id per prompt). `floor`: its value with the task gone (damage = drop / (clean - floor));
    `higher_is_better`: false for a loss (the drop is then its rise). `name`: its column's name."""

    fn: Callable
    floor: float = 0.0
    higher_is_better: bool = True
    name: str = "own"


@dataclass(frozen=True)
class _Task:
    """The probe's view of a metric (engine.ablation.Probe reads these four)."""

    metric_name: str
    metric: Callable
    higher_is_better: bool
    extra: dict = field(default_factory=dict)


def metric_of(metric) -> Metric | None:
    """A `Metric`, a plain function (floor 0, higher is better, named after the function) or None
    (the task's own metric)."""
    if metric is None or isinstance(metric, Metric):
        return metric
    if not callable(metric):
        raise TypeError(f"metric: expected a function of (logits, fields) or a circuitloc.Metric, got {metric!r}")
    name = getattr(metric, "__name__", "own")
    return Metric(metric, name="own" if name == "<lambda>" else name)


def rows_of(score_column, prompts: str) -> np.ndarray:
    """The positions in the task's rows of the prompts `prompts` names (`PROMPTS`)."""
    if prompts not in PROMPTS:
        raise ValueError(f"prompts={prompts!r}: expected one of {', '.join(PROMPTS)}")
    score = np.asarray(score_column, bool)
    rows = {"scoring": np.flatnonzero(score), "heldout": np.flatnonzero(~score)}.get(prompts, np.arange(len(score)))
    if len(rows) == 0:
        raise ValueError(f"prompts={prompts!r}: none of the {len(score)} prompts is a {prompts} prompt")
    return rows


def unit_sets(units, known: dict) -> list[list]:
    """The sets to ablate from `units`: one label ("L0H5"), a list of labels (one set, ablated
    together) or a list of such lists (one set each). `known`: {label: engine Unit}."""
    given = [units] if isinstance(units, str) else list(units)
    sets = [[s] if isinstance(s, str) else list(s) for s in given] if any(not isinstance(s, str) for s in given) \
        else [given]
    if not sets or not all(sets):
        raise ValueError("units: give a unit (\"L0H5\"), a set ([\"L0H5\", \"L1H2\"]) or a list of sets")
    labels = list(known)
    for s in sets:
        for u in s:
            if u not in known:
                raise ValueError(f"unknown unit {u!r} for this ablation: expected one of {labels[0]} to {labels[-1]}")
    return [[known[u] for u in s] for s in sets]


def probe_of(job: AblationJob, metric: Metric | None) -> tuple:
    """(the probe, higher_is_better, floor per prompt) for the task's metric or `metric`."""
    if metric is None:
        return job.probe, job.task.higher_is_better, np.asarray(job.floor_per_prompt(), float)
    task = _Task(metric.name, metric.fn, metric.higher_is_better)
    probe = ablation.Probe(job.scanner, job.prompts, task)
    return probe, metric.higher_is_better, np.full(len(job.df), float(metric.floor))


def interval_note(n_prompts: int, lo: float, hi: float) -> str:
    """Why an interval says less than it seems to: one prompt (no interval), or no spread."""
    if n_prompts < 2:
        return ONE_PROMPT
    return NO_SPREAD if np.isfinite(lo) and lo == hi else ""


def measure(job: AblationJob, sets: list[list], metric: Metric | None, bootstrap) -> tuple:
    """(one row per set: drop, damage, intervals; one row per prompt and set: clean, ablated, drop)."""
    probe, hib, floor_pp = probe_of(job, metric)
    res = probe.run([{}] + [ablation.as_sets(s) for s in sets])[probe.task.metric_name].numpy()
    clean_pp, ablated_pp = res[0].astype(float), res[1:].astype(float)
    clean, floor, ablated = float(clean_pp.mean()), float(floor_pp.mean()), ablated_pp.mean(axis=1)
    n = len(clean_pp)
    nan = np.full(len(sets), np.nan)
    iv = {"lo": nan, "hi": nan, "damage_lo": nan, "damage_hi": nan}
    if bootstrap and n >= 2:
        iv = stats.drop_intervals(clean_pp, ablated_pp, hib, bootstrap, floor=floor_pp)
    labels = ["+".join(u.label for u in s) for s in sets]
    summary = pl.DataFrame({
        "set": labels, "units": [[u.label for u in s] for s in sets], "metric": probe.task.metric_name,
        "clean": clean, "ablated": ablated, "floor": floor,
        "drop": np.asarray(metrics.drop(clean, ablated, hib), float), "drop_lo": iv["lo"], "drop_hi": iv["hi"],
        "damage": np.asarray(metrics.damage(clean, ablated, floor, hib), float),
        "damage_lo": iv["damage_lo"], "damage_hi": iv["damage_hi"], "n_prompts": n,
        "interval_note": [interval_note(n, lo, hi) for lo, hi in zip(iv["lo"], iv["hi"])],
    }, schema_overrides={"n_prompts": pl.Int64})
    per_prompt = pl.concat([pl.DataFrame({
        "set": label, "row": job.rows_in_full.astype(np.int64), "clean": clean_pp, "ablated": ablated_pp[i],
        "floor": floor_pp, "drop": np.asarray(metrics.drop(clean_pp, ablated_pp[i], hib), float),
    }) for i, label in enumerate(labels)])
    return summary, per_prompt


def few_prompts(frame: pl.DataFrame, n_prompts: int) -> pl.DataFrame:
    """A scores or curves frame measured on one prompt: its intervals (zero-width: a bootstrap of
    one prompt) set to NaN, with an `interval_note` saying why; else as it is."""
    if n_prompts >= 2:
        return frame
    bounds = [c for c in frame.columns if c.endswith(("_lo", "_hi")) and frame.schema[c].is_float()]
    return frame.with_columns(*[pl.lit(float("nan")).alias(c) for c in bounds], interval_note=pl.lit(ONE_PROMPT))


def attention(job: AblationJob, layer: int, head: int, tokens) -> pl.DataFrame:
    """One row per prompt, query position and key position (at most the query's) of the head's
    attention pattern (`blocks.{layer}.attn.hook_pattern`): `weight`, with the two positions' tokens."""
    name = f"blocks.{layer}.attn.hook_pattern"
    ids = job.prompts.input_ids
    with torch.no_grad():
        _, cache = job.bridge.run_with_cache(ids, names_filter=lambda n: n == name)
    pattern = cache[name][:, head].float().cpu().numpy()  # [N, T, T]
    frames = []
    for i, (row, last) in enumerate(zip(job.rows_in_full, job.prompts.last_pos.tolist())):
        q, k = np.tril_indices(last + 1)
        text = tokens(ids[i, : last + 1].tolist())
        frames.append(pl.DataFrame({"row": np.full(len(q), row, np.int64), "query": q.astype(np.int64),
                                    "key": k.astype(np.int64), "query_token": [text[j] for j in q],
                                    "key_token": [text[j] for j in k], "weight": pattern[i, q, k].astype(float)}))
    return pl.concat(frames)
