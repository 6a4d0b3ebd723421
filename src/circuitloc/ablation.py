"""Ablation units, single-unit scores and cumulative ablation curves on top of the scan engine."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from . import metrics as M
from .scan import Prompts, Scanner

log = logging.getLogger(__name__)


def parse_ablation(name: str) -> tuple[str, str]:
    """'zero' -> (zero, query); 'mean-kv' -> (mean, kv)."""
    kind, _, unit = name.partition("-")
    unit = unit or "query"
    if kind not in ("zero", "mean") or unit not in ("query", "kv"):
        raise ValueError(f"unknown ablation {name!r}: expected zero|mean, optionally with -query|-kv")
    return kind, unit


def units(card: dict, unit: str = "query") -> list[dict]:
    """One dict per unit: label, layer, index, and the query heads it silences."""
    L, H, K = card["n_layers"], card["n_heads"], card["n_kv_heads"]
    out = []
    for layer in range(L):
        if unit == "query":
            out += [{"unit": f"L{layer}H{h}", "layer": layer, "head": h, "heads": [h]} for h in range(H)]
        else:  # every query head that reads kv head g (grouped-query layout: consecutive heads)
            g_size = H // K
            out += [{"unit": f"L{layer}G{g}", "layer": layer, "head": g,
                     "heads": list(range(g * g_size, (g + 1) * g_size))} for g in range(K)]
    return out


def mean_replacement(scanner: Scanner, prompts: Prompts) -> dict:
    """Each head's mean output (z) over all real positions of the task set. Length buckets hold
    no padding and respect the scanner's token budget."""
    from .scan import _out_proj

    sums: dict[int, torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(scanner.layers):
        def hook(mod, args, i=i):
            z = args[0].view(*args[0].shape[:2], scanner.n_heads, scanner.d_head)
            sums[i] = sums.get(i, 0) + z.sum(dim=(0, 1))
        handles.append(_out_proj(layer).register_forward_pre_hook(hook))
    dev = scanner.unembed.weight.device
    try:
        with torch.no_grad():
            for rows in prompts.buckets(scanner.max_batch_tokens):
                scanner.base(input_ids=prompts.take(rows).input_ids.to(dev), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    count = float((prompts.last_pos + 1).sum())
    return {i: s / count for i, s in sums.items()}


def as_sets(unit_rows: list[dict]) -> dict:
    s: dict[int, list[int]] = {}
    for u in unit_rows:
        s.setdefault(u["layer"], []).extend(u["heads"])
    return s


def score_units(scanner: Scanner, prompts: Prompts, unit_rows: list[dict], task, floor: float,
                progress=None) -> pd.DataFrame:
    """Zero (or mean) ablate each unit alone; one row per unit."""
    metrics = {task.metric_name: task.metric, **task.extra}
    res = scanner.run(prompts, [{}] + [as_sets([u]) for u in unit_rows], metrics, progress=progress)
    name = task.metric_name
    clean = float(res[name][0].mean())
    ablated = res[name][1:].mean(dim=1).numpy()
    df = pd.DataFrame([{k: u[k] for k in ("layer", "head", "unit")} for u in unit_rows])
    df["heads"] = [list(u["heads"]) for u in unit_rows]
    df[f"{name}_clean"] = clean
    df[f"{name}_ablated"] = ablated
    df["drop"] = M.drop(clean, ablated, task.higher_is_better)
    df["damage"] = M.damage(clean, ablated, floor, task.higher_is_better)
    for extra in task.extra:
        df[f"{extra}_clean"] = float(res[extra][0].mean())
        df[f"{extra}_ablated"] = res[extra][1:].mean(dim=1).numpy()
    return df


def _curve_rows(method, order, values, clean, floor, task):
    rows = []
    for step, (u, v) in enumerate(zip(order, values), start=1):
        rows.append({"method": method, "step": step, "unit": u["unit"], "layer": u["layer"], "head": u["head"],
                     task.metric_name: float(v),
                     "damage": float(M.damage(clean, v, floor, task.higher_is_better))})
    return rows


def ranked_curve(scanner, prompts, ranked_units, task, clean, floor, max_steps, progress=None):
    """Units ablated cumulatively in descending single-unit order."""
    order = ranked_units[:max_steps]
    sets = [as_sets(order[: k + 1]) for k in range(len(order))]
    vals = scanner.run(prompts, sets, {task.metric_name: task.metric}, progress=progress)
    vals = vals[task.metric_name].mean(dim=1).numpy()
    return _curve_rows("ranked", order, vals, clean, floor, task)


def greedy_curve(scanner, prompts, ranked_units, task, clean, floor, candidates, max_steps, stop_damage=None):
    """Each step adds the candidate whose addition does most damage (top-M pool bounds the cost);
    it stops early once the damage reaches stop_damage (1.0: the task is gone)."""
    pool = list(ranked_units[:candidates])
    chosen, vals = [], []
    for _ in range(min(max_steps, len(pool))):
        trial = [as_sets(chosen + [u]) for u in pool]
        v = scanner.run(prompts, trial, {task.metric_name: task.metric})[task.metric_name].mean(dim=1).numpy()
        d = M.drop(clean, v, task.higher_is_better)
        best = int(np.argmax(d))
        chosen.append(pool.pop(best))
        vals.append(v[best])
        dmg = float(M.damage(clean, v[best], floor, task.higher_is_better))
        log.info("greedy step %d: %s damage %.3f", len(chosen), chosen[-1]["unit"], dmg)
        if stop_damage is not None and dmg >= stop_damage:
            break
    return _curve_rows("greedy", chosen, vals, clean, floor, task)


def random_control(scanner, prompts, unit_rows, task, clean, n_layers, draws, seed, exclude=()):
    """Negative control: single random units from the middle third of layers (for a 2-layer
    model, layer 0), never the units in `exclude` (the top unit)."""
    lo, hi = n_layers // 3, max(n_layers // 3 + 1, (2 * n_layers) // 3)
    exclude = set(exclude)
    mid = [u for u in unit_rows if lo <= u["layer"] < hi and u["unit"] not in exclude]
    rng = np.random.default_rng(seed)
    picks = [mid[i] for i in rng.choice(len(mid), size=min(draws, len(mid)), replace=False)]
    v = scanner.run(prompts, [as_sets([u]) for u in picks], {task.metric_name: task.metric})[task.metric_name]
    v = v.mean(dim=1).numpy()
    return pd.DataFrame({"draw": range(len(picks)), "unit": [u["unit"] for u in picks],
                         "layer": [u["layer"] for u in picks], "head": [u["head"] for u in picks],
                         task.metric_name: v, "drop": M.drop(clean, v, task.higher_is_better)})
