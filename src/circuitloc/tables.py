"""Table 1 (localization) and Table 2 (necessity check) for any task, from scores and curves."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import metrics as M
from .ablation import short_label, unit_kind
from .tasks.registry import task_of


def _unit_label(row) -> str:
    return short_label(row["unit"], row["layer"], row["head"])


def task_behaviour(clean: float, floor: float, higher_is_better: bool) -> bool:
    """Does the model do the task at all? Its clean metric must be better than the metric with the
    task gone (LD > 0, accuracy > 0; an induction loss below the no-repeat loss). A model without
    task behaviour has no circuit to localise and enters no concentration verdict."""
    span = float(M.drop(clean, floor, higher_is_better))
    return bool(np.isfinite(span) and span > 0)


def table1(task: str, cards: dict, scores: dict, curves: dict, threshold: float = 0.8) -> pd.DataFrame:
    t = task_of(task)
    rows = []
    for model, card in cards.items():
        s, c = scores[model], curves[model]
        top = s.loc[s["drop"].idxmax()]
        row = {"model": model, "family": card["family"], "attention": card["attention"],
               "n_params": int(card["n_params"]), "n_units": int(len(s)),
               f"baseline_{t.metric_name}": float(c["clean"].iloc[0]), "curve_prompts": int(c["n_prompts"].iloc[0]),
               "top_head": _unit_label(top), "top_head_score": float(top["drop"]),
               # % of the way to 'task gone': drop / clean for LD and accuracy; for the induction loss,
               # of the distance to the no-repeat loss (a % of a near-zero clean loss means nothing)
               "top_head_pct": 100 * float(top["damage"]),
               "top_head_damage": float(top["damage"])}
        if "drop_lo" in s:  # bootstrap over the scoring prompts
            row.update({"top_head_score_lo": float(top["drop_lo"]), "top_head_score_hi": float(top["drop_hi"]),
                        "top_head_pct_lo": 100 * float(top["damage_lo"]), "top_head_pct_hi": 100 * float(top["damage_hi"]),
                        "top_head_top_freq": float(top.get("top_freq", 1.0))})
        for extra in t.extra:  # facts: mean log-probability of the answer, clean and under the top unit
            row[f"{extra}_clean"] = float(s[f"{extra}_clean"].iloc[0])
            row[f"top_head_{extra}_ablated"] = float(top[f"{extra}_ablated"])
        for method in ("ranked", "greedy"):
            cm = c[c["method"] == method].sort_values("step")
            if len(cm) == 0:
                continue
            h = M.heads_to_threshold(cm["damage"].to_numpy(), threshold)
            suffix = "" if method == "ranked" else "_greedy"
            row[f"heads_to_80{suffix}"] = M.format_heads_to(h, len(cm))
            row[f"heads_to_80{suffix}_frac"] = h / len(s) if h is not None else np.nan
        row.update(M.concentration(s["drop"].to_numpy()))
        if "aligned" in s and s["aligned"].notna().any():  # mean / resample: share of aligned replacements
            row["aligned"] = float(s["aligned"].iloc[0])
        row["unit_kind"] = unit_kind(top["unit"])  # what top_head names: a query head, kv group or layer
        row["task_behaviour"] = task_behaviour(float(c["clean"].iloc[0]), float(c["floor"].iloc[0]),
                                               t.higher_is_better) if "floor" in c else None
        rows.append(row)
    return pd.DataFrame(rows)


def table2(task: str, cards: dict, curves: dict, controls: dict, scores: dict | None = None) -> pd.DataFrame:
    t = task_of(task)
    rows = []
    for model, card in cards.items():
        c = curves[model]
        first = c[(c["method"] == "ranked") & (c["step"] == 1)].iloc[0]
        clean = float(first["clean"])
        ablated = float(first[t.metric_name])
        floor = float(first["floor"])
        ctrl = controls[model]
        ctrl_pct = 100 * M.damage(clean, ctrl[t.metric_name].to_numpy(), floor, t.higher_is_better)
        behaves = task_behaviour(clean, floor, t.higher_is_better)
        rows.append({
            "model": model, "attention": card["attention"], f"{t.metric_name}_clean": clean,
            "top_head": short_label(first["unit"], first["layer"], first["head"]),
            f"{t.metric_name}_top_ablated": ablated,
            "drop_pct": 100 * float(first["damage"]),
            # a sign flip of a logit difference that was never positive says nothing: left empty
            "sign_flip": bool(np.sign(ablated) != np.sign(clean)) if t.name == "ioi" and behaves else None,
            "control_draws": int(len(ctrl)),
            # no draws where the middle third holds only the top unit (e.g. one kv group per layer)
            "control_drop_pct_mean": float(np.mean(ctrl_pct)) if len(ctrl) else np.nan,
            "control_drop_pct_max": float(np.max(ctrl_pct)) if len(ctrl) else np.nan,
            **(M.concentration(scores[model]["drop"].to_numpy()) if scores else {}),
            "task_behaviour": behaves,
        })
    return pd.DataFrame(rows)


def to_markdown(df: pd.DataFrame, title: str) -> str:
    fmt = df.copy()
    for col in fmt.columns:
        if fmt[col].dtype.kind == "f":
            fmt[col] = fmt[col].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    return f"### {title}\n\n" + fmt.to_markdown(index=False, disable_numparse=True) + "\n"
