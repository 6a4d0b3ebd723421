"""Ablation units, single-unit scores and cumulative ablation curves on top of the scan engine."""

from __future__ import annotations

import logging

import numpy as np
import polars as pl

from circuitloc import metrics as M
from circuitloc import stats as S
from circuitloc.engine.scan import Scanner
from circuitloc.metrics import rank, top  # noqa: F401  (the one order of units, re-exported for the engine's callers)
from circuitloc.plan.vocab import (  # noqa: F401
    KINDS,
    LAYER,
    QUERY,
    UNIT_LABEL,
    UNITS,
    parse_ablation,
    unit_kind,
    unit_label,
)
from circuitloc.prompts import Prompts
from circuitloc.units import Unit

log = logging.getLogger(__name__)


def units(card: dict, unit: str = "query") -> list[Unit]:
    """One `Unit` per unit: label, layer, index (`head`), and the query heads it silences. query: L{l}H{h};
    kv: L{l}G{g}, every query head of kv group g; layer: L{l}, every query head of layer l (one row
    per layer, head index 0, so layer x head maps and tables keep their shape)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: expected one of {', '.join(UNITS)}")
    L, H, K = card["n_layers"], card["n_heads"], card["n_kv_heads"]
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


def score_units(scanner: Scanner, prompts: Prompts, unit_rows: list[Unit], task, floor,
                progress=None, bootstrap: dict | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Ablate each unit alone. Returns one row per unit (with bootstrap intervals over prompts when
    `bootstrap` = {n, seed, ci} is given) and the per-prompt metric: a `clean` column and one column
    per unit, one row per prompt. `floor`: the metric when the task is gone, a number or one value
    per prompt (induction's no-repeat loss), resampled with the prompts for the damage intervals."""
    metrics = {task.metric_name: task.metric, **task.extra}
    res = scanner.run(prompts, [{}] + [as_sets([u]) for u in unit_rows], metrics, progress=progress)
    name = task.metric_name
    clean_pp, ablated_pp = res[name][0].numpy(), res[name][1:].numpy()
    clean = float(clean_pp.mean())
    floor_pp, floor = _floor(floor)
    ablated = ablated_pp.mean(axis=1)
    cols = {"layer": [u.layer for u in unit_rows], "head": [u.head for u in unit_rows],
            "unit": [u.label for u in unit_rows]}
    cols["heads"] = pl.Series([list(u.heads) for u in unit_rows], dtype=pl.List(pl.Int64))
    cols[f"{name}_clean"] = np.full(len(unit_rows), clean)
    cols[f"{name}_ablated"] = ablated
    cols["drop"] = np.asarray(M.drop(clean, ablated, task.higher_is_better))
    cols["damage"] = np.asarray(M.damage(clean, ablated, floor, task.higher_is_better))
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


def _floor(floor):
    """(as given, its mean): a per-prompt floor keeps its values for the bootstrap."""
    arr = np.asarray(floor, float)
    return arr, float(arr.mean())


def clean_span(clean_pp, floor_pp, task, bootstrap) -> tuple[float, float]:
    """Interval of clean - floor over these prompts (`stats.span_interval`): the conditioning rule
    reports a damage percentage only where it lies above 0 (`tables.damage_condition`)."""
    return S.span_interval(clean_pp, floor_pp, task.higher_is_better, int(bootstrap["n"]), int(bootstrap["seed"]),
                           float(bootstrap.get("ci", 0.95)))


def _intervals(clean_pp, ablated_pp, floor, task, bootstrap) -> dict:
    """Columns drop_lo/hi, damage_lo/hi (drop / (clean - floor), numerator and denominator from the
    same resample of prompts) and top_freq, the share of resamples in which the unit is the top unit."""
    iv = S.drop_intervals(clean_pp, ablated_pp, task.higher_is_better, int(bootstrap["n"]),
                          int(bootstrap["seed"]), float(bootstrap["ci"]), floor=floor)
    cols = {"drop_lo": iv["lo"], "drop_hi": iv["hi"], "damage_lo": iv["damage_lo"], "damage_hi": iv["damage_hi"]}
    if "top_freq" in iv and len(iv["lo"]) > 1:
        cols["top_freq"] = iv["top_freq"]
    return cols


def _curve_rows(method, order, values, clean, floor, task):
    rows = []
    for step, (u, v) in enumerate(zip(order, values), start=1):
        rows.append({"method": method, "step": step, "unit": u.label, "layer": u.layer, "head": u.head,
                     task.metric_name: float(v),
                     "damage": float(M.damage(clean, v, floor, task.higher_is_better))})
    return rows


def ranked_curve(scanner, prompts, ranked_units, task, clean, floor, max_steps, progress=None,
                 clean_pp=None, bootstrap=None):
    """Units ablated cumulatively in descending single-unit order (and, per step, the task's extra
    metrics beside its own); with per-prompt clean values and `bootstrap`, each step carries a
    damage interval over prompts. `floor`: a number or one value
    per prompt (then resampled with the prompts)."""
    floor_pp, floor = _floor(floor)
    order = ranked_units[:max_steps]
    sets = [as_sets(order[: k + 1]) for k in range(len(order))]
    res = scanner.run(prompts, sets, {task.metric_name: task.metric, **task.extra}, progress=progress)
    per_prompt = res[task.metric_name]
    vals = per_prompt.mean(dim=1).numpy()
    rows = _curve_rows("ranked", order, vals, clean, floor, task)
    for extra in task.extra:  # facts: the metrics it is not ranked on (accuracy, ...), at every step
        for r, v in zip(rows, res[extra].mean(dim=1).numpy()):
            r[extra] = float(v)
    if bootstrap and clean_pp is not None:
        iv = _intervals(clean_pp, per_prompt.numpy(), floor_pp, task, bootstrap)
        iv.pop("top_freq", None)
        rows = [{**r, **{k: float(v[i]) for k, v in iv.items()}} for i, r in enumerate(rows)]
    return rows


def greedy_curve(scanner, prompts, ranked_units, task, clean, floor, candidates, max_steps, stop_damage=None,
                 select=None):
    """Each step adds the candidate whose addition does most damage; the pool holds the top
    `candidates` units of the ranking not yet chosen and refills from it after every step, so the
    curve runs up to `max_steps` (or every unit), not only as many steps as the pool is large.

    `select` = (scanner, prompts, clean) of the prompts the choice is made on (the scoring prompts);
    the curve is reported on `prompts` (held out), so heads-to-threshold on it is not selected
    in-sample. Without `select` the choice is made on `prompts` themselves (in-sample). It stops
    early once the reported damage reaches stop_damage (1.0: the task is gone)."""
    sel_scanner, sel_prompts, sel_clean = select if select is not None else (scanner, prompts, clean)
    ranked_units = list(ranked_units)
    chosen, vals = [], []
    for _ in range(min(max_steps, len(ranked_units))):
        taken = {u.label for u in chosen}
        pool = [u for u in ranked_units if u.label not in taken][:candidates]
        trial = [as_sets(chosen + [u]) for u in pool]
        v = sel_scanner.run(sel_prompts, trial, {task.metric_name: task.metric})[task.metric_name].mean(dim=1).numpy()
        best = int(np.argmax(M.drop(sel_clean, v, task.higher_is_better)))
        chosen.append(pool[best])
        out = scanner.run(prompts, [as_sets(chosen)], {task.metric_name: task.metric})[task.metric_name]
        vals.append(float(out.mean(dim=1).numpy()[0]))
        dmg = float(M.damage(clean, vals[-1], floor, task.higher_is_better))
        log.info("greedy step %d: %s damage %.3f", len(chosen), chosen[-1].label, dmg)
        if stop_damage is not None and dmg >= stop_damage:
            break
    return _curve_rows("greedy", chosen, vals, clean, floor, task)


def random_control(scanner, prompts, unit_rows, task, clean, n_layers, draws, seed, exclude=()):
    """Negative control: single random units, never the units in `exclude` (the top unit), from
    every layer of a model with fewer than six layers, else from its middle third of layers
    (`metrics.control_layers`: the middle third of a 2-layer model was layer 0, the top unit's own)."""
    lo, hi = M.control_layers(n_layers)
    exclude = set(exclude)
    mid = [u for u in unit_rows if lo <= u.layer < hi and u.label not in exclude]
    rng = np.random.default_rng(seed)
    picks = [mid[i] for i in rng.choice(len(mid), size=min(draws, len(mid)), replace=False)]
    v = scanner.run(prompts, [as_sets([u]) for u in picks], {task.metric_name: task.metric})[task.metric_name]
    v = v.mean(dim=1).numpy()
    return pl.DataFrame({"draw": list(range(len(picks))), "unit": [u.label for u in picks],
                         "layer": [u.layer for u in picks], "head": [u.head for u in picks],
                         task.metric_name: v, "drop": np.asarray(M.drop(clean, v, task.higher_is_better))},
                        schema_overrides={"draw": pl.Int64, "unit": pl.String, "layer": pl.Int64, "head": pl.Int64})
