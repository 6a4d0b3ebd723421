"""Ablation units, single-unit scores and cumulative ablation curves on top of the scan engine."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from circuitloc import metrics
from circuitloc import stats
from circuitloc.engine.scan import Scanner
from circuitloc.engine.settings import RankedPlan  # noqa: F401  (re-exported: the plan of ranked_curve)
from circuitloc.metrics import rank, top  # noqa: F401  (the one order of units, re-exported for the engine's callers)
from circuitloc.modelcard import ModelCard
from circuitloc.plan.vocabulary.catalog import parse_ablation  # noqa: F401
from circuitloc.plan.vocabulary.vocab import (  # noqa: F401
    LAYER,
    QUERY,
    UNIT_LABEL,
    UNITS,
    unit_kind,
    unit_label,
)
from circuitloc.prompts import Prompts
from circuitloc.stats import Bootstrap
from circuitloc.units import Unit

log = logging.getLogger(__name__)


def units(card: ModelCard, unit: str = "query") -> list[Unit]:
    """One `Unit` per unit: label, layer, index (`head`), and the query heads it silences. query: L{l}H{h};
    kv: L{l}G{g}, every query head of kv group g; layer: L{l}, every query head of layer l (one row
    per layer, head index 0, so layer x head maps and tables keep their shape)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: expected one of {', '.join(UNITS)}")
    L, H, K = card.n_layers, card.n_heads, card.n_kv_heads
    out = []
    for layer in range(L):
        if unit == QUERY:
            out += [Unit(unit_label(unit, layer, h), layer, h, (h,)) for h in range(H)]
        elif unit == LAYER:
            out.append(Unit(unit_label(unit, layer), layer, 0, tuple(range(H))))
        else:  # every query head that reads kv head g (grouped-query layout: consecutive heads)
            g_size = H // K
            out += [Unit(unit_label(unit, layer, g), layer, g, tuple(range(g * g_size, (g + 1) * g_size)))
                    for g in range(K)]
    return out


def as_sets(unit_rows: list[Unit]) -> dict:
    """The engine's ablation set ({layer: [query heads]}, `scan.Ablation`) that silences all of `unit_rows`."""
    s: dict[int, list[int]] = {}
    for u in unit_rows:
        s.setdefault(u.layer, []).extend(u.heads)
    return s


@dataclass(frozen=True)
class Probe:
    """Where ablations are measured: the scan engine over a set of prompts, scored with a task's
    metric (`task`: metric_name, metric, extra, higher_is_better). One record instead of three
    arguments, since a greedy curve is chosen on one probe (the scoring prompts) and reported on
    another (held out)."""

    scanner: Scanner
    prompts: Prompts
    task: object

    def run(self, sets: list, extra: bool = False, progress=None) -> dict:
        """{metric: [len(sets), N] per-prompt values} of the ranked metric (and, with `extra`, the
        task's other metrics) under each ablation set."""
        task_metrics = {self.task.metric_name: self.task.metric, **(self.task.extra if extra else {})}
        return self.scanner.run(self.prompts, sets, task_metrics, progress=progress)

    def means(self, sets: list) -> np.ndarray:
        """The ranked metric's mean over the prompts under each ablation set."""
        return self.run(sets)[self.task.metric_name].mean(dim=1).numpy()

    @property
    def resumes(self) -> bool:
        """Whether `extend` resumes from the kept stream of `chosen` (engine.incremental); off: the
        full sets from the clean stream, as before (the bench's `today`)."""
        sc = self.scanner  # a stand-in with `run` alone (tests) runs the full sets
        return bool(getattr(sc, "prefix_reuse", False) and hasattr(sc, "extend") and getattr(sc, "incremental", True))

    def run_extend(self, chosen: list[Unit], additions: list[Unit], extra: bool = False, progress=None) -> dict:
        """As `run`, on `chosen` plus each unit of `additions` (one set per addition)."""
        if not self.resumes:
            return self.run([as_sets(list(chosen) + [u]) for u in additions], extra, progress)
        task_metrics = {self.task.metric_name: self.task.metric, **(self.task.extra if extra else {})}
        return self.scanner.extend(self.prompts, as_sets(list(chosen)), [as_sets([u]) for u in additions],
                                   task_metrics, progress)

    def extend(self, chosen: list[Unit], additions: list[Unit]) -> np.ndarray:
        """The ranked metric's mean under `chosen` plus each unit of `additions` (one set per
        addition): the step of a cumulative curve (ranked, greedy candidates, greedy reported
        steps), resumed at each addition's layer from what `chosen` alone computed."""
        return self.run_extend(chosen, additions)[self.task.metric_name].mean(dim=1).numpy()


@dataclass(frozen=True)
class Baseline:
    """What a curve's damage divides by: the clean metric and the metric with the task gone
    (`floor`: a number, or one value per prompt, resampled with the prompts); `clean_pp`: the clean
    metric per prompt, for damage intervals over prompts."""

    clean: float
    floor: object
    clean_pp: object = None


def score_units(probe: Probe, unit_rows: list[Unit], floor, progress=None,
                bootstrap: Bootstrap | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Ablate each unit alone. Returns one row per unit (with bootstrap intervals over prompts when
    `bootstrap` is given) and the per-prompt metric: a `clean` column and one column per unit, one
    row per prompt. `floor`: the metric when the task is gone, a number or one value per prompt
    (induction's no-repeat loss), resampled with the prompts for the damage intervals."""
    res = probe.run([{}] + [as_sets([u]) for u in unit_rows], extra=True, progress=progress)
    return score_table(probe.task, unit_rows, res, floor, bootstrap)


def score_table(task, unit_rows: list[Unit], res: dict, floor, bootstrap: Bootstrap | None = None):
    """`score_units`' two tables from the run's {metric: [1 + units, N]} (the clean run first,
    then each unit alone, in `unit_rows`' order): shared with the guided scan (`engine.guided_scan`),
    which builds the same rows for the units it scores exactly."""
    name = task.metric_name
    clean_pp, ablated_pp = res[name][0].numpy(), res[name][1:].numpy()
    clean = float(clean_pp.mean())
    floor_pp, floor = split_floor(floor)
    ablated = ablated_pp.mean(axis=1)
    cols = {"layer": [u.layer for u in unit_rows], "head": [u.head for u in unit_rows],
            "unit": [u.label for u in unit_rows]}
    cols["heads"] = pl.Series([list(u.heads) for u in unit_rows], dtype=pl.List(pl.Int64))
    cols[f"{name}_clean"] = np.full(len(unit_rows), clean)
    cols[f"{name}_ablated"] = ablated
    cols["drop"] = np.asarray(metrics.drop(clean, ablated, task.higher_is_better))
    cols["damage"] = np.asarray(metrics.damage(clean, ablated, floor, task.higher_is_better))
    if bootstrap:
        cols.update(_intervals(clean_pp, ablated_pp, floor_pp, task, bootstrap))
        lo, hi = clean_span(clean_pp, floor_pp, task, bootstrap)
        cols["clean_span_lo"], cols["clean_span_hi"] = np.full(len(unit_rows), lo), np.full(len(unit_rows), hi)
    for extra in task.extra:
        cols[f"{extra}_clean"] = np.full(len(unit_rows), float(res[extra][0].mean()))
        cols[f"{extra}_ablated"] = res[extra][1:].mean(dim=1).numpy()
    df = pl.DataFrame(cols, schema_overrides={"layer": pl.Int64, "head": pl.Int64, "unit": pl.String})
    per_prompt = pl.DataFrame({"clean": clean_pp, **{u.label: ablated_pp[i] for i, u in enumerate(unit_rows)}})
    return df, per_prompt


def split_floor(floor):
    """(as given, its mean): a per-prompt floor keeps its values for the bootstrap."""
    arr = np.asarray(floor, float)
    return arr, float(arr.mean())


def clean_span(clean_pp, floor_pp, task, bootstrap: Bootstrap) -> tuple[float, float]:
    """Interval of clean - floor over these prompts (`stats.span_interval`): the conditioning rule
    reports a damage percentage only where it lies above 0 (`tables.damage_condition`)."""
    return stats.span_interval(clean_pp, floor_pp, task.higher_is_better, bootstrap)


def _intervals(clean_pp, ablated_pp, floor, task, bootstrap: Bootstrap) -> dict:
    """Columns drop_lo/hi, damage_lo/hi (drop / (clean - floor), numerator and denominator from the
    same resample of prompts) and top_freq, the share of resamples in which the unit is the top unit."""
    iv = stats.drop_intervals(clean_pp, ablated_pp, task.higher_is_better, bootstrap, floor=floor)
    cols = {"drop_lo": iv["lo"], "drop_hi": iv["hi"], "damage_lo": iv["damage_lo"], "damage_hi": iv["damage_hi"],
            # the damage interval's method (by the span's noise) and whether it may under-cover
            "damage_ci": iv["damage_ci"], "damage_ci_undercover": iv["damage_ci_undercover"]}
    if "top_freq" in iv and len(iv["lo"]) > 1:
        cols["top_freq"] = iv["top_freq"]
    return cols


def step_rows(method, order, values, base: Baseline, task):
    floor = split_floor(base.floor)[1]
    rows = []
    for step, (u, v) in enumerate(zip(order, values), start=1):
        rows.append({"method": method, "step": step, "unit": u.label, "layer": u.layer, "head": u.head,
                     task.metric_name: float(v),
                     "damage": float(metrics.damage(base.clean, v, floor, task.higher_is_better))})
    return rows


def _ranked_values(probe: Probe, order, base: Baseline, plan: RankedPlan, progress) -> tuple[dict, str]:
    """({metric: [steps, N]}, why it stopped or ''): all steps in one stacked run where the engine
    does not resume and nothing stops early (as before), else step by step, each resumed from the last."""
    if not probe.resumes and plan.stop_damage is None:
        return probe.run([as_sets(order[: k + 1]) for k in range(len(order))], extra=True, progress=progress), ""
    floor, task, steps, streak = split_floor(base.floor)[1], probe.task, [], 0
    for k in range(len(order)):
        steps.append(probe.run_extend(order[:k], order[k : k + 1], extra=True, progress=progress))
        v = float(steps[-1][task.metric_name].mean())
        hit = plan.stop_damage is not None and metrics.damage(base.clean, v, floor, task.higher_is_better) >= plan.stop_damage
        streak = streak + 1 if hit else 0
        if hit and streak >= plan.stop_patience and k + 1 < len(order):
            return {m: torch.cat([s[m] for s in steps]) for m in steps[0]}, plan.stop_note()
    return {m: torch.cat([s[m] for s in steps]) for m in steps[0]}, ""


def ranked_curve(probe: Probe, ranked_units, base: Baseline, plan: RankedPlan | int, progress=None,
                 bootstrap: Bootstrap | None = None):
    """Units ablated cumulatively in descending single-unit order (and, per step, the task's extra
    metrics beside its own); with `base.clean_pp` and `bootstrap`, each step carries a damage
    interval over prompts (the floor resampled with the prompts where it is one value per prompt).
    `plan`: a `RankedPlan` or its max_steps. A curve that stops early says so in `ranked_stop` on
    its last row (a column only where a stop is configured; docs/method.md: what is assumed past it)."""
    plan = plan if isinstance(plan, RankedPlan) else RankedPlan(int(plan))
    task = probe.task
    floor_pp, _ = split_floor(base.floor)
    order = list(ranked_units[: plan.max_steps])
    res, stopped = _ranked_values(probe, order, base, plan, progress)
    per_prompt = res[task.metric_name]
    vals = per_prompt.mean(dim=1).numpy()
    rows = step_rows("ranked", order[: len(vals)], vals, base, task)
    for extra in task.extra:  # facts: the metrics it is not ranked on (accuracy, ...), at every step
        for r, v in zip(rows, res[extra].mean(dim=1).numpy()):
            r[extra] = float(v)
    if bootstrap and base.clean_pp is not None:
        iv = _intervals(base.clean_pp, per_prompt.numpy(), floor_pp, task, bootstrap)
        iv.pop("top_freq", None)
        rows = [{**r, **{k: v[i].item() for k, v in iv.items()}} for i, r in enumerate(rows)]
    if plan.stop_damage is not None:
        for i, r in enumerate(rows):
            r["ranked_stop"] = stopped if i == len(rows) - 1 else ""
    return rows


def control_pool(unit_rows: list[Unit], n_layers: int, exclude=()) -> list[Unit]:
    """The negative control's candidates: units of every layer of a model with fewer than six
    layers, else of its middle third of layers (`metrics.control_layers`: the middle third of a
    2-layer model was layer 0, often the top unit's own), never the units in `exclude` (the top unit)."""
    lo, hi = metrics.control_layers(n_layers)
    exclude = set(exclude)
    return [u for u in unit_rows if lo <= u.layer < hi and u.label not in exclude]


def random_control(probe: Probe, pool: list[Unit], clean, draws: int, seed: int,
                   bootstrap: Bootstrap | None = None) -> pl.DataFrame:
    """Negative control: up to `draws` single units of `pool` (`control_pool`), drawn with `seed`.
    `clean`: the clean metric, or a `Baseline` with per-prompt clean and floor, which with
    `bootstrap` gives each draw its damage interval over prompts (damage_lo, damage_hi), so the
    control claim can judge the draw that did most damage, not the draws' mean."""
    task = probe.task
    base = clean if isinstance(clean, Baseline) else None
    clean = base.clean if base else float(clean)
    rng = np.random.default_rng(seed)
    picks = [pool[i] for i in rng.choice(len(pool), size=min(draws, len(pool)), replace=False)]
    pp = probe.run([as_sets([u]) for u in picks])[task.metric_name] if picks else None
    v = pp.mean(dim=1).numpy() if picks else probe.means([])
    df = pl.DataFrame({"draw": list(range(len(picks))), "unit": [u.label for u in picks],
                       "layer": [u.layer for u in picks], "head": [u.head for u in picks],
                       task.metric_name: v, "drop": np.asarray(metrics.drop(clean, v, task.higher_is_better))},
                      schema_overrides={"draw": pl.Int64, "unit": pl.String, "layer": pl.Int64, "head": pl.Int64})
    if bootstrap and picks and base is not None and base.clean_pp is not None:
        iv = _intervals(np.asarray(base.clean_pp, float), pp.numpy(), split_floor(base.floor)[0], task, bootstrap)
        df = df.with_columns(damage_lo=pl.Series(iv["damage_lo"], dtype=pl.Float64),
                             damage_hi=pl.Series(iv["damage_hi"], dtype=pl.Float64))
    return df
