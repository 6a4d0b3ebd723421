"""What the controlled experiment's seeds say together: `summarize` turns the sweep toys' Table 1
rows into means and intervals across seeds, `paired` into paired comparisons against the MHA model
of the same seed and size, `overview` into one verdict per comparison. The toys themselves come
from circuitloc.plan.sweep.

Two rules keep a verdict meaning what it says (issue 31). Comparisons only at equal unit counts:
every concentration measure (top unit, heads-to as a fraction, curve area, effective units) depends
on how many units a model is cut into, so a KV-1 toy's 2 kv groups against the MHA toy's 16 heads
is described, never tested (`comparison`); where the KV-1 toy's groups are its layers, its rows are
paired with the MHA toy's layer rows instead (`vs_unit`). Families: the tests the config declares
primary (`sweep.primary`: units and measures, every task) are adjusted on their own, every other
test as a second, exploratory family (`{measure}_family`)."""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import metrics as M
from circuitloc import stats as S
from circuitloc.io import frame
from circuitloc.metrics import heads_to_label, heads_to_measures
from circuitloc.plan.vocab import QUERY
from circuitloc.report.analysis import behaves
from circuitloc.report.jobs import SWEEP_MEASURES, Primary, SweepStats  # noqa: F401  (the sweep's settings)
from circuitloc.report.tables import top_head_measure

MEASURES = SWEEP_MEASURES
PRIMARY, EXPLORATORY, DESCRIPTIVE = "primary", "exploratory", "descriptive"
TESTED = "tested"


def _interval(x, ci: float):
    """Mean and a t-interval across seeds (NaN bounds for a single seed). Never given a censored
    value: the callers pass uncensored measures only."""
    from scipy import stats

    x = np.asarray(x, float)
    m = float(np.mean(x)) if len(x) else np.nan
    if len(x) < 2:
        return m, np.nan, np.nan
    half = stats.t.ppf(0.5 + ci / 2, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - half, m + half


def per_model(table1, meta: dict, passed: dict, task: str):
    """One row per sweep model of a Table 1: its size, KV heads, seed, whether it passed its checks
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
            count, frac, censored = M.HeadsTo(r[base], bool(r[f"{base}_bounded"]), r["n_units"]).censored()
            h80.update({base: np.nan if censored else count, f"{base}_frac": np.nan if censored else frac,
                        f"{base}_censored": censored, f"{base}_bound": count if censored else np.nan,
                        f"{base}_frac_bound": frac if censored else np.nan})
        top, top_prompts = top_head_measure(r)  # held out where the curves were
        damage_ok = r.get("damage_ok")
        rows.append({**meta[r["model"]], "model": r["model"], "accepted": bool(passed.get(r["model"], True)),
                     "task_behaviour": bool(ok[i]),
                     "damage_ok": True if damage_ok is None else str(damage_ok).lower() in ("true", "1"),
                     "clean_metric": clean_col.removeprefix("baseline_") if clean_col else "",
                     "clean": _num(r[clean_col]) if clean_col else np.nan,
                     "top_head_pct": _num(r[top]), "top_head_prompts": top_prompts,
                     "top_head_pct_lo": _num(r.get(f"{top}_lo")),
                     "top_head_pct_hi": _num(r.get(f"{top}_hi")),
                     "curve_area": _num(r.get("curve_area")),
                     "rescaled_curve_area": _num(M.rescaled_curve_area(_num(r.get("curve_area")), r["n_units"])),
                     **h80,
                     "effective_units": _num(r["effective_units"]), "top_share": _num(r["top_share"]),
                     "n_units": int(r["n_units"])})
    pm = frame(rows)
    if len(pm):
        pm = pm.with_columns(used=pl.col("accepted") & pl.col("task_behaviour") & pl.col("damage_ok"))
    return pm


def _num(v) -> float:
    """A table cell as a float: empty (null) is NaN."""
    return float("nan") if v is None else float(v)


# uncensored: mean and t-interval across seeds (curve_area: threshold-free, never censored)
METRICS = ("top_head_pct", "curve_area", "rescaled_curve_area", "top_share", "effective_units")
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
            med, bound = S.censored_median(*_values(g, m))
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


def _paired_t(o, b, ci):
    """(mean difference, lo, hi, p) of a paired t-test of o against b over the pairs where both are
    finite (a value the conditioning rule refused drops its pair)."""
    from scipy import stats

    ok = np.isfinite(o) & np.isfinite(b)
    d = o[ok] - b[ok]
    mean, lo, hi = _interval(d, ci)
    p = float(stats.ttest_rel(o[ok], b[ok]).pvalue) if ok.sum() > 1 and np.std(d) > 0 else np.nan
    return mean, lo, hi, p


def _used(df) -> set:
    """Seeds of df whose model is `used` (passed its checks, shows task behaviour, may report damage)."""
    return set(df.filter(pl.col("used"))["seed"].to_list())


def _by_seed(df, seeds):
    """The rows of df for these seeds, in this order."""
    return pl.DataFrame({"seed": pl.Series(seeds, dtype=df["seed"].dtype)}).join(
        df, on="seed", how="left", maintain_order="left")


def _units(df, seeds) -> int | None:
    """The unit count of a model kind over these seeds (its first row's where no seed is paired)."""
    n = sorted(set(df.filter(pl.col("seed").is_in(seeds))["n_units"].to_list())) or df["n_units"].head(1).to_list()
    return int(n[0]) if len(n) == 1 else None  # one count per kind; mixed counts compare nothing


def _comparison(n_units, mha_n_units) -> str:
    """`tested` at equal unit counts; else why the row is only described."""
    if n_units is not None and n_units == mha_n_units:
        return TESTED
    return (f"{DESCRIPTIVE}: {n_units} vs {mha_n_units} units (every concentration measure depends on the unit "
            "count: described, not tested)")


def _compare(o, b, measures, ci) -> dict:
    """The measures of two aligned frames (one row per paired seed): means and t-intervals of each
    side, paired differences and tests (top head: held-out scores only; curve area: paired t;
    heads-to fractions: exact sign-flip on Gehan scores), and directions (+1: o more concentrated)."""
    row = {}
    for m in ("clean", "top_head_pct", "curve_area", "rescaled_curve_area"):
        row[f"mha_{m}"], row[f"mha_{m}_lo"], row[f"mha_{m}_hi"] = _interval(_finite(b[m]), ci)
        row[m], row[f"{m}_lo"], row[f"{m}_hi"] = _interval(_finite(o[m]), ci)
    where = sorted(set(b["top_head_prompts"].to_list()) | set(o["top_head_prompts"].to_list()))
    row["top_head_prompts"] = "/".join(where)
    mean, lo, hi, p = _paired_t(_floats(o["top_head_pct"]), _floats(b["top_head_pct"]), ci)
    if where and where != ["heldout"]:  # in-sample scores: shown, never tested
        p = np.nan
    row.update({"top_head_pct_diff": mean, "top_head_pct_diff_lo": lo, "top_head_pct_diff_hi": hi,
                "top_head_pct_p": p})
    mean, lo, hi, p = _paired_t(_floats(o["curve_area"]), _floats(b["curve_area"]), ci)
    row.update({"curve_area_diff": mean, "curve_area_diff_lo": lo, "curve_area_diff_hi": hi, "curve_area_p": p})
    # at equal unit counts an affine function of the raw area (same K): the same test, not a second one
    mean, lo, hi, _ = _paired_t(_floats(o["rescaled_curve_area"]), _floats(b["rescaled_curve_area"]), ci)
    row.update({"rescaled_curve_area_diff": mean, "rescaled_curve_area_diff_lo": lo,
                "rescaled_curve_area_diff_hi": hi})
    for h in measures:
        m = f"{h}_frac"
        for side, t in (("mha_", b), ("", o)):
            row[f"{side}{m}_median"], row[f"{side}{m}_median_is_bound"] = S.censored_median(*_values(t, m))
        bv, bc = _values(b, m)
        ov, oc = _values(o, m)
        ok = np.isfinite(bv) & np.isfinite(ov)  # a refused value drops its pair
        test = S.paired_censored(bv[ok], bc[ok], ov[ok], oc[ok])
        row.update({f"{m}_wins": test["wins"], f"{m}_losses": test["losses"], f"{m}_ties": test["ties"],
                    f"{m}_p": test["p"], f"{h}_direction": _sign(-test["stat"]),
                    f"{h}_censored_pairs": int((bc | oc)[ok].sum())})
    row["direction_top_head"] = _sign(row["top_head_pct_diff"])
    row["direction_curve_area"] = _sign(row["curve_area_diff"])
    return row


def _pair_row(key: dict, other, base, seeds, measures, ci) -> dict:
    """One paired row: `key` (size, kv_heads, vs_kv_heads, unit, vs_unit), the unit counts, whether
    it is tested, and `_compare` on the paired seeds (p-values blanked for a descriptive row)."""
    n_units, mha_n_units = _units(other, seeds), _units(base, seeds)
    row = {**key, "n_units": n_units, "mha_n_units": mha_n_units, "comparison": _comparison(n_units, mha_n_units),
           "n_pairs": len(seeds), "seeds": " ".join(map(str, seeds)), "clean_metric": other["clean_metric"][0]}
    row.update(_compare(_by_seed(other, seeds), _by_seed(base, seeds), measures, ci))
    if row["comparison"] != TESTED:
        row.update({t: np.nan for t in paired_tests(row)})
    return row


def paired(pm, settings: SweepStats | None = None, unit: str = QUERY, layers=None):
    """Each KV-head count against the MHA model (kv = n_heads) of the same size and seed, under
    `unit`, on the seeds where both are `used` (passed their checks, show task behaviour, may report
    damage). Top head score and curve area (higher = more concentrated): mean difference,
    t-interval, paired t-test; the top head is tested only when both sides' scores are held out
    (`top_head_prompts`). Heads-to-threshold as a fraction (lower = more concentrated; '> K'
    censored), greedy (the paper's) and ranked: wins, losses and ties of the fewer-KV model, and an
    exact sign-flip test on Gehan scores. The rescaled curve area is shown beside the raw one.

    Only rows at equal unit counts are tested (`comparison`); a row at different counts keeps its
    numbers, without p-values or verdict. `layers`: per-model rows of the same toys under layer units
    (`per_model` of the layer Table 1): a fewer-KV toy whose unit count differs from the MHA toy's
    but equals the MHA toy's layer count (KV 1: its groups are its layers) gets a second row against
    the MHA toy's layers (`vs_unit` layer). p-values are adjusted (`settings.p_adjust`) within their
    family (`{measure}_family`: primary, exploratory or descriptive; `sweep.primary`);
    `direction_top_head`, `direction_heads_to` (+1: fewer KV heads more concentrated) and
    `verdict_heads_to` (which heads-to measure) are written beside `verdict`, so the overview reads
    the same directions."""
    st = settings or SweepStats()
    measures = heads_to_measures(pm.columns)
    paper = measures[-1] if measures else None  # greedy when present: the paper's heads-to
    rows = []
    for (size,), g in pm.group_by("size", maintain_order=True):
        mha_kv = _mha_kv(g)
        base = g.filter(pl.col("kv_heads") == mha_kv)
        lay = None if layers is None or len(layers) == 0 else \
            layers.filter((pl.col("size") == size) & (pl.col("kv_heads") == mha_kv))
        for kv in sorted(g["kv_heads"].unique().to_list(), reverse=True):
            if kv == mha_kv:
                continue
            other = g.filter(pl.col("kv_heads") == kv)
            key = {"size": size, "kv_heads": int(kv), "vs_kv_heads": mha_kv, "unit": unit, "vs_unit": unit}
            row = _pair_row(key, other, base, _pair_seeds(g, int(kv), mha_kv), measures, st.ci)
            rows.append(row)
            if row["comparison"] != TESTED and lay is not None and len(lay) and \
                    _units(lay, sorted(_used(lay))) == row["n_units"] and unit != "layer":
                seeds = sorted(_used(other) & _used(lay))
                rows.append(_pair_row({**key, "vs_unit": "layer"}, other, lay, seeds, measures, st.ci))
    for r in rows:
        r["direction_heads_to"] = r[f"{paper}_direction"] if paper else 0
    df = frame(rows)
    if len(df) == 0:
        return df
    df = df.with_columns(verdict_heads_to=pl.lit(paper or "", pl.String))
    df = _adjust_families(df, st, "")
    verdicts = [verdict(r, st.p_adjust, st.alpha, st.p_adjust) for r in df.iter_rows(named=True)]
    return df.with_columns(verdict=pl.Series(verdicts, dtype=pl.String),
                           verdict_family=pl.Series([verdict_family(r) for r in df.iter_rows(named=True)],
                                                    dtype=pl.String))


def measure_of(test: str) -> str:
    """The `sweep.primary` name of a p-value column: top_head, curve_area, heads_to_ranked, heads_to_greedy."""
    if test == "top_head_pct_p":
        return "top_head"
    if test == "curve_area_p":
        return "curve_area"
    return "heads_to_greedy" if test.removesuffix("_frac_p").endswith("_greedy") else "heads_to_ranked"


def family_column(test: str) -> str:
    """The column naming a test's family: top_head_pct_p -> top_head_pct_family, heads_to_80_frac_p ->
    heads_to_80_family."""
    return test.removesuffix("_p").removesuffix("_frac") + "_family"


def family(row: dict, test: str, primary: Primary) -> str:
    """primary (its unit and measure are declared primary and both sides have that unit),
    exploratory (any other test), or descriptive (a row at different unit counts: no test)."""
    if (row.get("comparison") or TESTED) != TESTED:
        return DESCRIPTIVE
    unit = row.get("unit") or QUERY
    same = (row.get("vs_unit") or unit) == unit
    return PRIMARY if same and unit in primary.units and measure_of(test) in primary.measures else EXPLORATORY


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
        adj[mask] = S.P_ADJUST[st.p_adjust](values[mask])
        counts[f] = int(np.isfinite(values[mask]).sum())
    for j, col in enumerate(tests):
        out = f"{col}{suffix}" if suffix else f"{col}_{st.p_adjust}"
        at = df.columns.index(col) + 1
        df = df.insert_column(at, pl.Series(out, adj[:, j], dtype=pl.Float64))
        if family_column(col) not in df.columns:
            df = df.insert_column(at + 1, pl.Series(family_column(col), fam[:, j].tolist(), dtype=pl.String))
    return df.with_columns(**{f"n_tests_{f}{suffix}": pl.lit(n, pl.Int64) for f, n in counts.items()})


def paired_tests(columns) -> list[str]:
    """The p-value columns of a paired table, in order: top head, curve area, each heads-to measure."""
    hs = heads_to_measures([c.removesuffix("_frac_p") for c in columns if c.endswith("_frac_p")])
    return [c for c in ("top_head_pct_p", "curve_area_p") if c in columns] + [f"{h}_frac_p" for h in hs]


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


def overview(tables: dict, settings: SweepStats | None = None):
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
            "top_head_pct_diff_lo", "top_head_pct_diff_hi", "top_head_prompts", "mha_curve_area", "curve_area",
            "curve_area_diff", "curve_area_diff_lo", "curve_area_diff_hi", "mha_rescaled_curve_area",
            "rescaled_curve_area", "rescaled_curve_area_diff", "direction_top_head", "direction_curve_area",
            "direction_heads_to", "verdict_heads_to"]
    tests = []
    for df in tables.values():
        tests += [t for t in paired_tests(df.columns) if t not in tests]
    rows = []
    for (task, ablation), df in tables.items():
        unit = ablation.split("-", 1)[1]
        for r in df.iter_rows(named=True):
            row = {"task": task, "unit": unit, "ablation": ablation, **{k: r.get(k) for k in keep}}
            row["vs_unit"] = row["vs_unit"] or unit
            row["comparison"] = row["comparison"] or TESTED  # a table from before the column: equal counts
            for m in [t.removesuffix("_p") for t in tests if t.endswith("_frac_p")]:
                h = m.removesuffix("_frac")
                for side in ("mha_", ""):
                    med, bound = r.get(f"{side}{m}_median"), r.get(f"{side}{m}_median_is_bound")
                    row[f"{side}{h}_median"] = None if med is None or (isinstance(med, float) and np.isnan(med)) \
                        else M_label(med, str(bound) in ("True", "true"))
                for k in ("wins", "losses", "ties"):
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
    return out.with_columns(verdict_all=pl.Series(verdicts, dtype=pl.String),
                            verdict_family=pl.Series([verdict_family(r) for r in out.iter_rows(named=True)],
                                                     dtype=pl.String))


def M_label(value: float, bounded: bool) -> str:
    """A median heads-to fraction as the one heads-to formatter writes it ('0.25', '> 0.5')."""

    return heads_to_label(float(f"{value:.3g}"), bounded)
