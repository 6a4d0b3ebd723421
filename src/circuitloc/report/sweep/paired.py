"""Paired comparisons of the sweep: each fewer-KV toy against the MHA toy of the same seed and
size, only at equal unit counts (other rows described, never tested)."""


from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import stats
from circuitloc.io import frame
from circuitloc.metrics import heads_to_measures
from circuitloc.plan.vocabulary.vocab import QUERY, ZERO
from circuitloc.report.records import SWEEP_MEASURES, Primary, SweepStats  # noqa: F401  (the sweep's settings)
from circuitloc.report.sweep.summary import DESCRIPTIVE, TESTED, _floats, _interval, _mha_kv, _pair_seeds, _values
from circuitloc.report.sweep.verdicts import _adjust_families, _finite, _sign, paired_tests, verdict, verdict_family


def _paired_t(o, b, ci):
    """(mean difference, lo, hi, p) of a paired t-test of o against b over the pairs where both are
    finite (a value the conditioning rule refused drops its pair)."""
    import scipy.stats

    ok = np.isfinite(o) & np.isfinite(b)
    d = o[ok] - b[ok]
    mean, lo, hi = _interval(d, ci)
    p = float(scipy.stats.ttest_rel(o[ok], b[ok]).pvalue) if ok.sum() > 1 and np.std(d) > 0 else np.nan
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
    d = _floats(o["top_head_pct"]) - _floats(b["top_head_pct"])
    sd = float(np.std(d[np.isfinite(d)], ddof=1)) if np.isfinite(d).sum() > 1 else np.nan  # the MDE's scale
    row.update({"top_head_pct_diff": mean, "top_head_pct_diff_lo": lo, "top_head_pct_diff_hi": hi,
                "top_head_pct_diff_sd": sd, "top_head_pct_p": p})
    mean, lo, hi, p = _paired_t(_floats(o["curve_area"]), _floats(b["curve_area"]), ci)
    row.update({"curve_area_diff": mean, "curve_area_diff_lo": lo, "curve_area_diff_hi": hi, "curve_area_p": p})
    # at equal unit counts an affine function of the raw area (same K): the same test, not a second one
    mean, lo, hi, _ = _paired_t(_floats(o["rescaled_curve_area"]), _floats(b["rescaled_curve_area"]), ci)
    row.update({"rescaled_curve_area_diff": mean, "rescaled_curve_area_diff_lo": lo,
                "rescaled_curve_area_diff_hi": hi})
    row.update(_sufficiency(o, b, ci))
    for h in measures:
        m = f"{h}_frac"
        for side, t in (("mha_", b), ("", o)):
            row[f"{side}{m}_median"], row[f"{side}{m}_median_is_bound"] = stats.censored_median(*_values(t, m))
        bv, bc = _values(b, m)
        ov, oc = _values(o, m)
        ok = np.isfinite(bv) & np.isfinite(ov)  # a refused value drops its pair
        test = stats.paired_censored(bv[ok], bc[ok], ov[ok], oc[ok])
        row.update({f"{m}_wins": test["wins"], f"{m}_losses": test["losses"], f"{m}_ties": test["ties"],
                    f"{m}_untied": test["untied"], f"{m}_p": test["p"], f"{h}_direction": _sign(-test["stat"]),
                    f"{h}_censored_pairs": int((bc | oc)[ok].sum())})
    row["direction_top_head"] = _sign(row["top_head_pct_diff"])
    row["direction_curve_area"] = _sign(row["curve_area_diff"])
    return row


def _sufficiency(o, b, ci) -> dict:
    """MIB's CPR and CMD of both sides, their paired differences and paired t-tests (`cpr_p`,
    `cmd_p`: exploratory unless the config declares them primary), and directions (+1: the fewer-KV
    model's top units are the more sufficient: higher CPR, lower CMD). A side without them (a
    Table 1 from before they existed) gives NaN, no test."""
    row = {}
    for m, sign in (("cpr", 1), ("cmd", -1)):
        ov = _floats(o[m]) if m in o.columns else np.full(len(o), np.nan)
        bv = _floats(b[m]) if m in b.columns else np.full(len(b), np.nan)
        row[f"mha_{m}"], row[f"mha_{m}_lo"], row[f"mha_{m}_hi"] = _interval(bv[np.isfinite(bv)], ci)
        row[m], row[f"{m}_lo"], row[f"{m}_hi"] = _interval(ov[np.isfinite(ov)], ci)
        mean, lo, hi, p = _paired_t(ov, bv, ci)
        row.update({f"{m}_diff": mean, f"{m}_diff_lo": lo, f"{m}_diff_hi": hi, f"{m}_p": p,
                    f"direction_{m}": _sign(sign * mean)})
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


def paired(pm, settings: SweepStats | None = None, unit: str = QUERY, layers=None, kind: str = ZERO):
    """Each KV-head count against the MHA model (kv = n_heads) of the same size and seed, under
    `unit`, on the seeds where both are `used` (passed their checks, show task behaviour, may report
    damage). Top head score, curve area and MIB's CPR (higher = more concentrated) and CMD (lower):
    mean difference, t-interval, paired t-test; the top head is tested only when both sides' scores are held out
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
            key = {"size": size, "kv_heads": int(kv), "vs_kv_heads": mha_kv, "kind": kind, "unit": unit,
                   "vs_unit": unit}
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
