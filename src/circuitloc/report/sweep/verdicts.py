"""The sweep's verdicts: each paired test in its family (the config's primary family, adjusted on
its own; every other test exploratory), "yes"/"no" only when both verdict measures are significant
in the same direction, "partial" when one is, "mixed" when they disagree; `overview` gathers them."""


from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import stats
from circuitloc.io import frame
from circuitloc.metrics import heads_to_label, heads_to_measures
from circuitloc.plan.vocabulary.catalog import parse_ablation
from circuitloc.plan.vocabulary.vocab import QUERY, ZERO
from circuitloc.report.records import SWEEP_MEASURES, Primary, SweepStats  # noqa: F401  (the sweep's settings)
from circuitloc.report.sweep.summary import DESCRIPTIVE, EXPLORATORY, PRIMARY, TESTED, _floats


def measure_of(test: str) -> str:
    """The `sweep.primary` name of a p-value column: top_head, curve_area, cpr, cmd, heads_to_ranked,
    heads_to_greedy."""
    if test == "top_head_pct_p":
        return "top_head"
    if test in ("curve_area_p", "cpr_p", "cmd_p"):
        return test.removesuffix("_p")
    return "heads_to_greedy" if test.removesuffix("_frac_p").endswith("_greedy") else "heads_to_ranked"


def family_column(test: str) -> str:
    """The column naming a test's family: top_head_pct_p -> top_head_pct_family, heads_to_80_frac_p ->
    heads_to_80_family."""
    return test.removesuffix("_p").removesuffix("_frac") + "_family"


def family(row: dict, test: str, primary: Primary) -> str:
    """primary (its unit, ablation kind and measure are declared primary and both sides have that
    unit), exploratory (any other test), or descriptive (a row at different unit counts: no test)."""
    if (row.get("comparison") or TESTED) != TESTED:
        return DESCRIPTIVE
    unit = row.get("unit") or QUERY
    same = (row.get("vs_unit") or unit) == unit
    declared = unit in primary.units and (row.get("kind") or ZERO) in primary.kinds
    return PRIMARY if same and declared and measure_of(test) in primary.measures else EXPLORATORY


def _adjust_families(df, st: SweepStats, suffix: str):
    """Beside each test column: its family and its p adjusted (`st.p_adjust`) within that family over
    every row of df (`{test}_{p_adjust}`, or `{test}{suffix}` when a suffix is given); and the number
    of tests in each family (`n_tests_primary{suffix}`, `n_tests_exploratory{suffix}`)."""
    tests = paired_tests(df.columns)
    rows = list(df.iter_rows(named=True))
    fam = np.array([[family(r, t, st.primary) for t in tests] for r in rows], dtype=object).reshape(len(rows),
                                                                                                      len(tests))
    values = np.column_stack([_floats(df[c]) for c in tests]) if tests else np.zeros((len(rows), 0))
    adj = np.full(values.shape, np.nan)
    counts = {}
    for f in (PRIMARY, EXPLORATORY):
        mask = fam == f
        adj[mask] = stats.P_ADJUST[st.p_adjust](values[mask])
        counts[f] = int(np.isfinite(values[mask]).sum())
    for j, col in enumerate(tests):
        out = f"{col}{suffix}" if suffix else f"{col}_{st.p_adjust}"
        at = df.columns.index(col) + 1
        df = df.insert_column(at, pl.Series(out, adj[:, j], dtype=pl.Float64))
        if family_column(col) not in df.columns:
            df = df.insert_column(at + 1, pl.Series(family_column(col), fam[:, j].tolist(), dtype=pl.String))
    return df.with_columns(**{f"n_tests_{f}{suffix}": pl.lit(n, pl.Int64) for f, n in counts.items()})


def paired_tests(columns) -> list[str]:
    """The p-value columns of a paired table, in order: top head, curve area, CPR, CMD, each heads-to
    measure."""
    hs = heads_to_measures([c.removesuffix("_frac_p") for c in columns if c.endswith("_frac_p")])
    return [c for c in ("top_head_pct_p", "curve_area_p", "cpr_p", "cmd_p") if c in columns] + \
        [f"{h}_frac_p" for h in hs]


def _sign(x) -> int:

    return int(np.sign(x)) if x is not None and np.isfinite(x) else 0


def _finite(col):

    x = _floats(col)
    return x[np.isfinite(x)]


def _verdict_tests(row: dict) -> list[str]:
    """The two tests a verdict reads: the top head and the paper's heads-to (`verdict_heads_to`)."""
    paper = row.get("verdict_heads_to") or ""
    return ["top_head_pct_p"] + ([f"{paper}_frac_p"] if paper else [])


def verdict_family(row: dict) -> str:
    """primary when both verdict tests are primary, descriptive for a row at different unit counts,
    else exploratory."""
    fams = [row.get(family_column(t)) or EXPLORATORY for t in _verdict_tests(row)]
    if DESCRIPTIVE in fams:
        return DESCRIPTIVE
    return PRIMARY if all(f == PRIMARY for f in fams) and len(fams) == 2 else EXPLORATORY


def _p(row, key) -> float:
    v = row.get(key)
    return float("nan") if v is None else float(v)


def verdict(row: dict, suffix: str, alpha: float, p_adjust: str = "holm") -> str:
    """The one verdict of a paired comparison, from a paired-table row: its directions
    (`direction_top_head`, `direction_heads_to`: +1 = fewer KV heads more concentrated) and the
    p-values of those two tests adjusted within their family as `suffix` says (`holm` / `bh` within
    the table, `all` over every table). 'yes' / 'no (less concentrated)' only when both are
    significant and point the same way; 'partial' when one is significant and the other not (it
    says which, and where the other points); 'mixed' when both are significant in opposite
    directions; else no clear difference. A row whose verdict tests are not both primary is prefixed
    'exploratory: '; a row at different unit counts gets no verdict. The curve area is reported,
    adjusted, and not part of it."""
    if (row.get("n_pairs") or 0) < 2:
        return ("n/a: fewer than 2 seeds where both models passed their checks, show task behaviour and may "
                "report damage (clean above its floor)")
    fam = verdict_family(row)
    if fam == DESCRIPTIVE:
        return (f"descriptive: {row.get('n_units')} vs {row.get('mha_n_units')} units, not compared (every "
                "concentration measure depends on the unit count)")
    tests = _verdict_tests(row)
    ps = [_p(row, f"{t}_{suffix}") for t in tests]
    dirs = [int(row.get("direction_top_head") or 0), int(row.get("direction_heads_to") or 0)][:len(tests)]
    sig = [bool(np.isfinite(p) and p < alpha) for p in ps]
    tag = "" if fam == PRIMARY else "exploratory: "
    label = f"{p_adjust}-adjusted alpha {alpha}"
    if not any(sig):
        return f"{tag}no clear difference ({label})"
    if all(sig) and len(sig) == 2:
        if dirs == [1, 1]:
            return f"{tag}fewer KV heads more concentrated: yes"
        if dirs == [-1, -1]:
            return f"{tag}fewer KV heads more concentrated: no (less concentrated)"
        return (f"{tag}mixed: both significant, top head {_word(dirs[0])} and heads-to {_word(dirs[1])} "
                f"({label})")
    names = ["top head", "heads-to"]
    s = sig.index(True)
    if len(sig) == 1:
        return f"{tag}partial: top head significant ({_word(dirs[0])}), no heads-to measure ({label})"
    o = 1 - s
    points = "points the same way" if dirs[o] == dirs[s] else "points the other way" if dirs[o] == -dirs[s] \
        else "points neither way"
    return (f"{tag}partial: {names[s]} significant ({_word(dirs[s])}), {names[o]} not ({points}) ({label})")


def _word(d: int) -> str:
    return {1: "says fewer KV more concentrated", -1: "says fewer KV less concentrated"}.get(d, "says neither")


def overview(tables: dict, settings: SweepStats | None = None, by_kind: bool = True):
    """Every paired comparison of the sweep in one table, {(task, ablation): paired table}: what
    the README quotes. Each p-value is given raw, adjusted within its family in its own table (as
    there, `_table`) and within its family over every table (`_all`): the primary family
    (`sweep.primary`, every task) on its own, every other test as the exploratory family;
    `verdict_table` is the table's verdict and `verdict_all` the same function (`verdict`) on the
    same directions with the `_all` p-values, so the two differ only by the adjustment. A task key
    may carry a metric ('facts (accuracy)'), so that both facts metrics of a sweep are adjusted
    together."""
    st = settings or SweepStats()
    keep = ["size", "kv_heads", "vs_kv_heads", "vs_unit", "n_units", "mha_n_units", "comparison", "n_pairs",
            "clean_metric", "mha_clean", "clean", "mha_top_head_pct", "top_head_pct", "top_head_pct_diff",
            "top_head_pct_diff_lo", "top_head_pct_diff_hi", "top_head_pct_diff_sd", "top_head_prompts",
            "mha_curve_area", "curve_area", "curve_area_diff", "curve_area_diff_lo", "curve_area_diff_hi", "mha_rescaled_curve_area",
            "rescaled_curve_area", "rescaled_curve_area_diff", "mha_cpr", "cpr", "cpr_diff", "cpr_diff_lo",
            "cpr_diff_hi", "mha_cmd", "cmd", "cmd_diff", "cmd_diff_lo", "cmd_diff_hi", "direction_top_head",
            "direction_curve_area", "direction_cpr", "direction_cmd", "direction_heads_to", "verdict_heads_to"]
    tests = []
    for df in tables.values():
        tests += [t for t in paired_tests(df.columns) if t not in tests]
    rows = []
    for (task, ablation), df in tables.items():
        kind, unit = parse_ablation(ablation)
        for r in df.iter_rows(named=True):
            row = {"task": task, "kind": kind, "unit": unit, "ablation": ablation, **{k: r.get(k) for k in keep}}
            row["vs_unit"] = row["vs_unit"] or unit
            row["comparison"] = row["comparison"] or TESTED  # a table from before the column: equal counts
            for m in [t.removesuffix("_p") for t in tests if t.endswith("_frac_p")]:
                h = m.removesuffix("_frac")
                for side in ("mha_", ""):
                    med, bound = r.get(f"{side}{m}_median"), r.get(f"{side}{m}_median_is_bound")
                    row[f"{side}{h}_median"] = None if med is None or (isinstance(med, float) and np.isnan(med)) \
                        else M_label(med, str(bound) in ("True", "true"))
                for k in ("wins", "losses", "ties", "untied"):
                    row[f"{h}_{k}"] = r.get(f"{m}_{k}")
            for t in tests:
                row[t] = r.get(t)
                row[f"{t}_table"] = r.get(f"{t}_{st.p_adjust}")
            row["verdict_table"] = r.get("verdict")
            rows.append(row)
    out = frame(rows)
    if len(out) == 0:
        return out
    out = _adjust_families(out.with_columns(*[pl.col(t).cast(pl.Float64) for t in tests]), st, "_all")
    grouped = {c for t in tests for c in (family_column(t), f"{t}_table", f"{t}_all")}
    # each test's columns together: raw, its family, adjusted within its table, over all tables
    out = out.select([c for c in out.columns if c not in grouped for c in
                      ([c, family_column(c), f"{c}_table", f"{c}_all"] if c in tests else [c])])
    verdicts = [verdict(r, "all", st.alpha, st.p_adjust) for r in out.iter_rows(named=True)]
    out = out.with_columns(verdict_all=pl.Series(verdicts, dtype=pl.String),
                           verdict_family=pl.Series([verdict_family(r) for r in out.iter_rows(named=True)],
                                                    dtype=pl.String))
    return across_kinds(out, st) if by_kind else out  # by_kind False: a resample's verdicts only


def verdict_class(text: str | None) -> str:
    """What a verdict says, without its family tag and adjustment: yes, no, partial, mixed, none
    (no clear difference), n/a or descriptive; so verdicts under different kinds can be compared."""
    t = (text or "n/a").removeprefix("exploratory: ")
    for start, cls in (("fewer KV heads more concentrated: yes", "yes"), ("fewer KV heads more concentrated: no", "no"),
                       ("partial", "partial"), ("mixed", "mixed"), ("no clear difference", "none"),
                       ("descriptive", "descriptive")):
        if t.startswith(start):
            return cls
    return "n/a"


def verdict_key(text: str | None) -> str:
    """What a verdict says with its measure and direction, without its family tag and adjustment:
    'yes', 'no', 'none', 'n/a', 'descriptive', 'partial (top head, more)', 'mixed (top head more,
    heads-to less)'. Two kinds agree only when their keys are equal: a 'partial' on the top head
    saying more concentrated and one on heads-to saying less are two different answers."""
    cls = verdict_class(text)
    t = (text or "").removeprefix("exploratory: ")
    way = {"says fewer KV more concentrated": "more", "says fewer KV less concentrated": "less",
           "says neither": "neither"}
    if cls == "partial":
        measure = "heads-to" if t.startswith("partial: heads-to") else "top head"
        return f"partial ({measure}, {_way(t.partition(' not (')[0], way)})"
    if cls == "mixed":  # 'top head says ... and heads-to says ...'
        top, rest = t.partition(" and heads-to ")[::2]
        return f"mixed (top head {_way(top, way)}, heads-to {_way(rest, way)})"
    return cls


def _way(text: str, way: dict) -> str:
    """The direction a verdict's phrase names: more, less or neither."""
    return next((w for k, w in way.items() if k in text), "neither")


def across_kinds(out: pl.DataFrame, st: SweepStats) -> pl.DataFrame:
    """Beside each verdict: `verdict_by_kind`, what the same comparison (task, size, KV heads, units)
    says under each ablation kind of the sweep (`verdict_key`: class, measure and direction), and
    `holds_under`, the kinds whose verdict says the same as the primary kind's ('every kind', or the
    list, e.g. 'zero only'): a claim that holds under zero ablation only may be an artefact of
    replacing a head's output with zeros. Every kind is read at one adjustment: its tests adjusted
    within that kind's copy of the primary family (`sweep.primary` with its kinds replaced by the one
    kind, and for a row outside the primary units by the row's unit), never the primary kind's
    against the exploratory family's hundreds; `kinds_adjustment` says how many tests each copy holds."""
    key = ["task", "size", "kv_heads", "vs_kv_heads", "unit", "vs_unit"]
    tests = [t for t in ("top_head_pct_p", *(c for c in out.columns if c.endswith("_frac_p"))) if t in out.columns]
    rows = list(out.iter_rows(named=True))
    by_kind, sizes = [""] * len(rows), {}
    for kind in dict.fromkeys(out["kind"].to_list()):
        for units in {tuple(st.primary.units) if r["unit"] in st.primary.units else (r["unit"],) for r in rows}:
            fam = Primary(units, st.primary.measures, (kind,))
            labels = np.array([[family(r, t, fam) for t in tests] for r in rows], dtype=object).reshape(len(rows), -1)
            member = labels == PRIMARY
            p = np.column_stack([_floats(out[t]) for t in tests]).reshape(len(rows), -1)
            adj = np.full(p.shape, np.nan)
            adj[member] = stats.P_ADJUST[st.p_adjust](p[member])
            sizes[(kind, units)] = int(np.isfinite(p[member]).sum())
            for i, r in enumerate(rows):
                if r["kind"] == kind and (r["unit"] in units):
                    fams = {family_column(t): labels[i, j] for j, t in enumerate(tests)}
                    by_kind[i] = verdict_key(verdict({**r, **fams, **{f"{t}_kind": adj[i, j] for j, t in
                                                                      enumerate(tests)}}, "kind", st.alpha))
    groups: dict = {}
    for r, v in zip(rows, by_kind, strict=True):
        groups.setdefault(tuple(r[k] for k in key), []).append((r["kind"], v))
    by, holds = [], []
    for r in rows:
        g = groups[tuple(r[k] for k in key)]
        by.append("; ".join(f"{k}: {c}" for k, c in g))
        ref = next((c for k, c in g if k in st.primary.kinds), g[0][1])
        same = [k for k, c in g if c == ref]
        holds.append("every kind" if len(same) == len(g) else f"{', '.join(same)} only" if same else "")
    note = f"{st.p_adjust} within each kind's copy of the primary family: " + ", ".join(
        f"{k} {n} tests" for (k, u), n in sizes.items() if u == tuple(st.primary.units)) + \
        f" ({', '.join(st.primary.units)} units; a row under other units: that unit's copy)"
    return out.with_columns(verdict_by_kind=pl.Series(by, dtype=pl.String), holds_under=pl.Series(holds, dtype=pl.String),
                            kinds_adjustment=pl.lit(note, pl.String))


def M_label(value: float, bounded: bool) -> str:
    """A median heads-to fraction as the one heads-to formatter writes it ('0.25', '> 0.5')."""

    return heads_to_label(float(f"{value:.3g}"), bounded)
