"""Tables a paper can take: the markdown of Table 1 and Table 2 in the paper's form (model,
attention, baseline, top head, its score as "56% [44, 77]", heads-to-80%) with the few columns
beyond the paper that matter; every column stays in the CSV beside it."""

from __future__ import annotations

import math

import polars as pl

from circuitloc.metrics import heads_to_label, heads_to_measures
from circuitloc.plan.vocabulary.vocab import TOP_COLUMN


def _whole(x: float) -> str:
    """x rounded to a whole number, never '-0' (a small negative control drop reads 0)."""
    text = f"{x:.0f}"
    return "0" if text == "-0" else text


def as_float(v) -> float:
    """A table cell as a float; NaN for a missing or non-numeric one."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def pct(v, lo=None, hi=None) -> str:
    """'56% [44, 77]' (the paper's form), or '' for a missing value."""
    v, lo, hi = as_float(v), as_float(lo), as_float(hi)
    if math.isnan(v):
        return ""
    return f"{_whole(v)}%" + ("" if math.isnan(lo) or math.isnan(hi) else f" [{_whole(lo)}, {_whole(hi)}]")


def ci_note(v) -> str:
    """An interval's note cell (`*_ci_note`) as text: '' for a missing one (null, NaN, empty)."""
    return v.strip() if isinstance(v, str) else ""


def _params(n) -> str:
    if n is None:
        return ""
    n = float(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"


def _count(row: dict, name: str) -> str:
    v = row.get(name)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return heads_to_label(v, bool(row.get(f"{name}_bounded")))


def _threshold_label(name: str) -> str:
    """heads_to_80_greedy -> 'heads-to-80% (greedy)'; heads_to_80 -> 'heads-to-80% (ranked)'."""
    level = name.removeprefix("heads_to_").removesuffix("_greedy").replace("_", ".")
    return f"heads-to-{level}% ({'greedy' if name.endswith('_greedy') else 'ranked'})"


def _num(v, digits: int = 3) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.{digits}g}"


def _of_units(r: dict) -> str:
    """Effective units with the unit count they are out of ('6.51 of 16'): at most K, so rows of
    different K are not read side by side."""
    eff = _num(r.get("effective_units"))
    eff = f"{eff} of {r['n_units']}" if eff and r.get("n_units") is not None else eff
    return f"{eff} *" if eff and r.get("scores_note") else eff  # * with estimated unit scores (the note says)


def _note(r: dict, intervals: dict | None = None):
    """The row's damage note, the notes on the intervals it shows (`intervals`: {shown column:
    its `*_ci_note` column}, e.g. 'top unit score: interval widened (skewed prompts)') and, after a
    guided scan, which numbers include estimated unit scores."""
    parts = [str(r.get("damage_note") or "")]
    parts += [f"{shown}: {r[col]}" for shown, col in (intervals or {}).items() if ci_note(r.get(col))]
    if r.get("scores_note"):
        parts.append(f"* {r['scores_note']}")
    return "; ".join(p for p in parts if p)


def table1_form(df: pl.DataFrame) -> pl.DataFrame:
    """Table 1's paper form: at most 12 columns, the top unit's score on held-out prompts with its
    95% interval, heads-to counts written '> K' where the curve never got there."""
    top = next((c for c in TOP_COLUMN.values() if c in df.columns), None)
    base = next((c for c in df.columns if c.startswith("baseline_")), None)
    counts = heads_to_measures(df.columns)[::-1]  # greedy (the paper's) first
    rows = []
    for r in df.iter_rows(named=True):
        row = {"model": r["model"], "attention": r.get("attention", ""), "params": _params(r.get("n_params")),
               "units": r.get("n_units"), f"baseline ({base.removeprefix('baseline_')})" if base else "baseline":
               _num(r.get(base)) if base else "", "top unit": r.get(top, "") if top else "",
               "top unit score": pct(r.get("top_head_pct_heldout"), r.get("top_head_pct_heldout_lo"),
                                      r.get("top_head_pct_heldout_hi"))}
        row.update({_threshold_label(c): _count(r, c) for c in counts})
        row.update({"curve area": _num(r.get("curve_area")), "effective units": _of_units(r),
                    "note": _note(r, {"top unit score": "top_head_pct_heldout_ci_note"})})
        rows.append(row)
    return pl.DataFrame(rows) if rows else pl.DataFrame({"model": []})


def audit_cell(r: dict) -> str:
    """The guided greedy's audit (`intervals.audit_agreement`) as '3 of 4: 75% [19, 99]' (audited steps
    where attribution's pick was the exact best, with its exact 95% interval), 'no audited steps' for a
    guided curve without them, 'not guided' for an exact greedy (or none), '' for a table without it."""
    n = r.get("n_audited_steps")
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return ""
    if int(n):
        return f"{int(r['n_audit_agrees'])} of {int(n)}: " + pct(r.get("audit_agree_pct"), r.get("audit_agree_pct_lo"),
                                                                  r.get("audit_agree_pct_hi"))
    return "no audited steps" if r.get("n_guided_steps") else "not guided"


def table2_form(df: pl.DataFrame) -> pl.DataFrame:
    """Table 2's paper form: the metric clean and with only the top unit ablated, the drop, the
    sign flip, the random-unit control, and the guided greedy's audit (`audit_cell`)."""
    top = next((c for c in TOP_COLUMN.values() if c in df.columns), None)
    clean = next((c for c in df.columns if c.endswith("_clean")), None)
    ablated = next((c for c in df.columns if c.endswith("_top_ablated")), None)
    rows = [{"model": r["model"], "attention": r.get("attention", ""), "top unit": r.get(top, "") if top else "",
             "clean": _num(r.get(clean)) if clean else "", "top unit ablated": _num(r.get(ablated)) if ablated else "",
             "drop": pct(r.get("drop_pct")), "sign flip": r.get("sign_flip"),
             "control mean drop": pct(r.get("control_drop_pct_mean")),
             "control max drop": pct(r.get("control_drop_pct_max"), r.get("control_max_drop_pct_lo"),
                                     r.get("control_max_drop_pct_hi")), "control draws": r.get("control_draws"),
             "audit agrees": audit_cell(r), "note": _note(r)} for r in df.iter_rows(named=True)]
    return pl.DataFrame(rows) if rows else pl.DataFrame({"model": []})
