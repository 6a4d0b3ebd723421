"""Table 1 (localization) and Table 2 (necessity check) for any task, from scores and curves."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from tabulate import tabulate

from circuitloc import intervals, io, metrics, sufficiency
from circuitloc.io import frame
from circuitloc.metrics import rank
from circuitloc.plan.vocabulary import catalog as registry, vocab
from circuitloc.report.records import TableJob
from circuitloc.plan.vocabulary.vocab import TOP_COLUMN, unit_kind
from circuitloc.report.tables.html_page import display_rows, html_path, table_page


def measure(task: str, frame: pl.DataFrame) -> tuple[vocab.TaskSpec, str, tuple]:
    """(the task's spec, the metric a scores or curve table was computed with (its `metric`
    column, checked against the task's metrics), the task's other metrics)."""
    spec = registry.task(task)
    name = spec.metric(str(frame["metric"][0]))
    return spec, name, tuple(m for m in spec.metrics if m != name)


def _top_label(row) -> dict:
    """{top_head | top_kv_group | top_layer: the unit's label} for a scores or curve row: the same
    label (L0H3, L0G1, L0) as the scores, stability and specificity tables."""
    return {TOP_COLUMN[unit_kind(row["unit"])]: row["unit"]}


def _ci_note(row) -> str:
    """The damage interval's note (`intervals.note`): widened where the prompts are skewed, may
    under-cover with fewer than `intervals.MIN_PROMPTS` prompts (docs/method.md's coverage table), else ""."""
    return intervals.note(row.get("damage_ci"), row.get("damage_ci_undercover") in (True, "True", "true"))


def scores_note(s: pl.DataFrame) -> str:
    """Where a guided scan left unit scores to attribution (`estimated`, engine.guided_scan): how
    many, and which whole-model numbers of the row include them (the top unit is always exact)."""
    est = metrics.estimated(s)
    if not est.any():
        return ""
    return (f"guided scan: {int(est.sum())} of {len(s)} unit scores estimated by attribution; effective units, "
            "top share, CPR and CMD include them")


def top_head_measure(row) -> tuple[str, str]:
    """(column prefix, prompts) of the top unit's score a comparison should read from a Table 1 row:
    its score on held-out prompts when the curves ran on prompts disjoint from the scoring set
    (`top_head_pct_heldout`), else its score on the scoring prompts that selected it (`top_head_pct`,
    optimistic by selection)."""
    held = row.get("top_head_pct_heldout")
    if row.get("curve_prompts") == "heldout" and held is not None and math.isfinite(float(held)):
        return "top_head_pct_heldout", "heldout"
    return "top_head_pct", "scoring"


def task_behaviour(clean: float, floor: float, higher_is_better: bool) -> bool:
    """Does the model do the task at all? Its clean metric must be better than the metric with the
    task gone (LD > 0, accuracy > 0; an induction loss below the no-repeat loss). A model without
    task behaviour has no circuit to localise and enters no concentration verdict."""
    span = float(metrics.drop(clean, floor, higher_is_better))
    return bool(np.isfinite(span) and span > 0)


def _has_value(col: pl.Series) -> bool:
    """Any entry neither null nor NaN."""
    return (col.fill_nan(None) if col.dtype.is_float() else col).drop_nulls().len() > 0


def _curve_prompts(c: pl.DataFrame) -> str:
    """Which prompts a curve table ran on: heldout (none of the scoring prompts) or all."""
    return str(c["prompts"][0])


def table1(task: str, cards: dict, scores: dict, curves: dict, threshold: float,
           min_heldout: int = 0) -> pl.DataFrame:
    """Per model: the top unit and its score on the scoring prompts (in-sample: those prompts also
    selected it), the same unit's score on the curve prompts (`_heldout`: the ranked curve's first
    step ablates exactly the top unit; held-out prompts unless `curve_prompts` is 'all'), the
    baseline, heads-to-threshold (`heads_to_{pct}`, from the configured threshold), the curve
    area and MIB's sufficiency measures (`cpr`, `cmd`: `sufficiency_measures`) on the curve
    prompts. `n_score_prompts`, `curve_prompts` and `n_curve_prompts` say which
    prompts each number used; a percentage the conditioning rule refuses (`damage_condition`:
    clean ≈ floor, or fewer held-out prompts than `min_heldout`) is left empty, with `damage_note`."""
    rows = []
    for model, card in cards.items():
        s, c = scores[model], curves[model]
        t, metric, _ = measure(task, c)
        top = rank(s).row(0, named=True)
        assert not top.get("estimated"), f"{model}: the top unit {top['unit']} of a guided scan is not exact"
        ranked = c.filter(pl.col("method") == "ranked").sort("step")
        first = ranked.row(0, named=True) if len(ranked) else None
        row = {"model": model, "family": card.family, "attention": card.attention,
               "n_params": int(card.n_params), "n_units": int(len(s)),
               f"baseline_{metric}": float(c["clean"][0])}
        for also in (m for m in t.baselines if m != metric):  # facts: top-1 accuracy on the curve prompts
            row[f"baseline_{also}"] = float(c[f"{also}_clean"][0])
        row.update({
            "n_score_prompts": int(s["n_prompts"][0]),
            "curve_prompts": _curve_prompts(c), "n_curve_prompts": int(c["n_prompts"][0]),
            **_top_label(top), "top_head_score": float(top["drop"]),
            # % of the way to 'task gone': drop / clean for LD, accuracy and margin; for the induction
            # loss, of the distance to the no-repeat loss (a % of a near-zero clean loss means nothing)
            "top_head_pct": 100 * float(top["damage"]),
            "top_head_damage": float(top["damage"])})
        if "drop_lo" in s.columns:  # bootstrap intervals over the scoring prompts (a job run with a bootstrap)
            row.update({"top_head_score_lo": float(top["drop_lo"]), "top_head_score_hi": float(top["drop_hi"]),
                        "top_head_pct_lo": 100 * float(top["damage_lo"]), "top_head_pct_hi": 100 * float(top["damage_hi"]),
                        "top_head_top_freq": float(top.get("top_freq", 1.0)), "top_head_pct_ci_note": _ci_note(top)})
        if first is not None and first["unit"] == top["unit"]:  # the top unit alone, on the curve prompts
            row["top_head_score_heldout"] = float(metrics.drop(float(c["clean"][0]), float(first[metric]),
                                                               t.higher_is_better))
            row["top_head_pct_heldout"] = 100 * float(first["damage"])
            if "damage_lo" in ranked.columns:
                row["top_head_pct_heldout_lo"] = 100 * float(first["damage_lo"])
                row["top_head_pct_heldout_hi"] = 100 * float(first["damage_hi"])
                row["top_head_pct_heldout_ci_note"] = _ci_note(first)
        for extra in (m for m in t.metrics if m != metric):  # facts: the other metrics, clean and under the top unit
            row[f"{extra}_clean"] = float(s[f"{extra}_clean"][0])
            row[f"top_head_{extra}_ablated"] = float(top[f"{extra}_ablated"])
        for method in ("ranked", "greedy"):
            cm = c.filter(pl.col("method") == method).sort("step")
            if len(cm) == 0:
                continue
            # heads_to_{pct}[_greedy] (count), _bounded (never reached the threshold: more than count), _frac
            row.update(metrics.HeadsTo.of_curve(cm["damage"].to_numpy(), threshold, len(s))
                       .columns(metrics.heads_to_name(threshold, method)))
        if len(ranked):  # threshold-free: area under the ranked damage curve against the fraction of units
            row["curve_area"] = metrics.curve_area(ranked["damage"].to_numpy(), len(s))
            row["curve_area_covered"] = min(1.0, len(ranked) / len(s))
            # on one scale for every unit count (1: one unit removes the task, 0.5: linear)
            row["rescaled_curve_area"] = metrics.rescaled_curve_area(row["curve_area"], len(s))
        row.update(sufficiency_measures(c))
        row.update(metrics.concentration(s["drop"].to_numpy()))
        if _has_value(s["aligned"]):  # a kind that builds a replacement: share of aligned replacements
            row["aligned"] = float(s["aligned"][0])
        row["unit_kind"] = unit_kind(top["unit"])  # what the top unit is: a query head, kv group or layer
        row["task_behaviour"] = task_behaviour(float(c["clean"][0]), float(c["floor"][0]), t.higher_is_better)
        row.update(damage_condition(s, c, metric, t.higher_is_better, min_heldout))
        if scores_note(s):  # a guided scan's table only: an exact run's Table 1 keeps its columns
            row["scores_note"] = scores_note(s)
        rows.append(_condition_row(row, threshold))
    return frame(rows)


def sufficiency_measures(c: pl.DataFrame) -> dict:
    """MIB's CPR and CMD of a curve table's sufficiency rows (`sufficiency.cpr_cmd`, over the
    fractions the rows record); NaN where the table holds no sufficiency rows."""
    suff = c.filter(pl.col("method") == sufficiency.METHOD).sort("step")
    if len(suff) == 0:
        return {"cpr": float("nan"), "cmd": float("nan")}
    cpr, cmd = sufficiency.cpr_cmd(suff["faithfulness"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
                                   suff["fraction"].to_numpy())
    return {"cpr": cpr, "cmd": cmd}


# The conditioning rule: a damage percentage is a ratio over (clean - floor); where the clean
# metric's interval on the prompts it is reported on does not lie above the floor (or a held-out
# set is too small to carry an interval), the ratio says nothing and is not reported.
NA_FLOOR = "n/a (clean ≈ floor)"


def _above_floor(df: pl.DataFrame, clean_col: str, higher_is_better: bool) -> bool:
    """Does the clean metric on these prompts lie clearly above its floor? The bootstrap interval
    of clean - floor (`clean_span_lo`) above 0; a job run without a bootstrap has no interval, and
    its point estimate decides."""
    lo = df["clean_span_lo"][0] if "clean_span_lo" in df.columns else None
    if lo is not None:
        return bool(math.isfinite(float(lo)) and float(lo) > 0)
    return bool(float(metrics.drop(float(df[clean_col][0]), float(df["floor"][0]), higher_is_better)) > 0)


def damage_condition(scores: pl.DataFrame | None, curves: pl.DataFrame, metric: str, higher_is_better: bool,
                     min_heldout: int = 0) -> dict:
    """score_damage_ok / damage_ok: may a damage percentage be reported on the scoring prompts / on
    the curve prompts? damage_note: why not (clean ≈ floor, or fewer held-out prompts than the
    task's `min_heldout`: too few to carry an interval). Without `scores`, only the curve prompts
    are judged."""
    score_ok = _above_floor(scores, f"{metric}_clean", higher_is_better) if scores is not None else True
    curve_ok = _above_floor(curves, "clean", higher_is_better)
    n = int(curves["n_prompts"][0])
    small = _curve_prompts(curves) == "heldout" and n < int(min_heldout or 0)
    notes = []
    if not score_ok:
        notes.append(f"scoring prompts: {NA_FLOOR}")
    if not curve_ok:
        notes.append(f"curve prompts: {NA_FLOOR}")
    if small:
        notes.append(f"n/a (held out: {n} prompts < min_heldout {int(min_heldout)})")
    return {"score_damage_ok": score_ok, "damage_ok": curve_ok and not small, "damage_note": "; ".join(notes)}


def _condition_row(row: dict, threshold: float) -> dict:
    """Blank every damage-based number the conditioning rule does not allow (`damage_condition`)."""
    if not row["score_damage_ok"]:
        for k in ("top_head_pct", "top_head_pct_lo", "top_head_pct_hi", "top_head_damage"):
            if k in row:
                row[k] = float("nan")
    if not row["damage_ok"]:
        for k in ("top_head_pct_heldout", "top_head_pct_heldout_lo", "top_head_pct_heldout_hi",
                  "curve_area", "rescaled_curve_area", "cpr", "cmd"):
            if k in row:
                row[k] = float("nan")
        for method in ("ranked", "greedy"):
            name = metrics.heads_to_name(threshold, method)
            if name in row:
                row[name], row[f"{name}_bounded"], row[f"{name}_frac"] = None, None, float("nan")
    return row


def _control_max_interval(ctrl: pl.DataFrame, ctrl_pct, pct_ok: bool, n_prompts: int = 0, ci: float = 0.95) -> dict:
    """control_max_drop_pct_lo/hi: the `ci` interval of the largest draw (NaN without a bootstrap, draws or
    a percentage); control_adj_drop_pct_lo/hi: the largest lower and upper bound of any draw at the Bonferroni
    level 1 - (1 - ci) / draws (`control_adj_level_pct`), its `ci` interval's sides scaled by the ratio of the
    levels' Student t quantiles (n_prompts - 1 df): what `claims_draws.random_heads_harmless` judges."""
    ok = len(ctrl) and pct_ok and "damage_lo" in ctrl.columns
    i = int(np.argmax(ctrl_pct)) if ok else 0
    out = {f"control_max_drop_pct_{s}": 100 * float(ctrl[f"damage_{s}"][i]) if ok else np.nan for s in ("lo", "hi")}
    k = len(ctrl)
    out.update(control_adj_level_pct=100 * (1 - (1 - ci) / k) if k else np.nan, control_adj_drop_pct_lo=np.nan,
               control_adj_drop_pct_hi=np.nan)
    if ok:
        from scipy.special import stdtrit  # here: only Table 2 needs it

        df = max(int(n_prompts) - 1, 1)
        scale = stdtrit(df, 1 - (1 - ci) / (2 * k)) / stdtrit(df, 1 - (1 - ci) / 2)
        est = np.asarray(ctrl_pct, float)
        lo, hi = 100 * ctrl["damage_lo"].to_numpy(), 100 * ctrl["damage_hi"].to_numpy()
        with np.errstate(invalid="ignore"):  # an unbounded side stays unbounded
            out["control_adj_drop_pct_lo"] = float(np.max(est - (est - lo) * scale))
            out["control_adj_drop_pct_hi"] = float(np.max(est + (hi - est) * scale))
    return out


def table2(task: str, cards: dict, curves: dict, controls: dict, scores: dict | None = None,
           job: TableJob | None = None) -> pl.DataFrame:
    """Per model: the top unit alone and random control units, on the curve prompts (held-out unless
    `curve_prompts` says all): any non-top unit of a model with fewer than six layers, else of its middle third
    of layers (`metrics.control_layers`; `control_rule` says which); percentages only where the conditioning
    rule allows them (`damage_condition`; else empty, with `damage_note`). `job`: its `min_heldout` and the
    level `ci` of the control draws' intervals (config bootstrap.ci); none: no minimum, 95%."""
    job = job or TableJob(task, "")
    rows = []
    for model, card in cards.items():
        c = curves[model]
        t, metric, _ = measure(task, c)
        first = c.filter((pl.col("method") == "ranked") & (pl.col("step") == 1)).row(0, named=True)
        clean = float(first["clean"])
        ablated = float(first[metric])
        floor = float(first["floor"])
        ctrl = controls[model]
        ctrl_pct = 100 * metrics.damage(clean, ctrl[metric].to_numpy(), floor, t.higher_is_better)
        behaves = task_behaviour(clean, floor, t.higher_is_better)
        cond = damage_condition(None if scores is None else scores[model], c, metric, t.higher_is_better,
                                job.min_heldout)
        pct_ok = cond["damage_ok"]
        rows.append({
            "model": model, "attention": card.attention, "curve_prompts": _curve_prompts(c),
            "n_curve_prompts": int(c["n_prompts"][0]),
            f"{metric}_clean": clean,
            **_top_label(first),
            f"{metric}_top_ablated": ablated,
            "drop_pct": 100 * float(first["damage"]) if pct_ok else np.nan,
            # a sign flip of a logit difference that was never positive says nothing: left empty
            "sign_flip": bool(np.sign(ablated) != np.sign(clean)) if t.sign_flip and behaves else None,
            "control_draws": int(len(ctrl)),
            "control_rule": metrics.control_rule(card.n_layers),
            # no draws where the control's layers hold only the top unit (e.g. one kv group, one layer)
            "control_drop_pct_mean": float(np.mean(ctrl_pct)) if len(ctrl) and pct_ok else np.nan,
            "control_drop_pct_max": float(np.max(ctrl_pct)) if len(ctrl) and pct_ok else np.nan,
            # the largest draw's damage interval over prompts (the control claim judges that draw)
            **_control_max_interval(ctrl, ctrl_pct, pct_ok, int(c["n_prompts"][0]), job.ci),
            **(metrics.concentration(scores[model]["drop"].to_numpy()) if scores else {}),
            **({"scores_note": scores_note(scores[model])} if scores and scores_note(scores[model]) else {}),
            **intervals.audit_agreement(c), "task_behaviour": behaves,  # the guided greedy's audit, at 95%
            "damage_ok": pct_ok, "damage_note": "; ".join(n for n in cond["damage_note"].split("; ")
                                                          if not n.startswith("scoring")),
        })
    return frame(rows)


def to_markdown(df: pl.DataFrame, title: str) -> str:
    """A titled pipe table of `df`'s display form (`html_table.display_rows`: floats to 4 significant
    digits, NaN and null empty, a bounded count as '> K')."""
    shown, rows = display_rows(df)
    return f"### {title}\n\n" + tabulate(rows, headers=shown, tablefmt="pipe", disable_numparse=True) + "\n"


def write_table(df: pl.DataFrame, csv, md, title: str, shown: pl.DataFrame | None = None) -> None:
    """A table as CSV (`io.write_csv`, every column), as titled markdown (`to_markdown`) of `shown`
    (a reader's form of it, e.g. report.tables.paper) or the whole table, and as the HTML page the
    report shows (`html_table`, beside the CSV: `html_path`), all atomically."""
    io.write_csv(df, csv)
    io.write_text(to_markdown(df if shown is None else shown, title), md)
    page = table_page(title, csv, [("", df if shown is None else shown)], None if shown is None else df)
    io.write_text(page, html_path(csv))
