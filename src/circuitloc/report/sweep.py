"""What the controlled experiment's seeds say together: `summarize` turns the sweep toys' Table 1
rows into means and intervals across seeds, `paired` into paired comparisons against the MHA model
of the same seed and size, `overview` into one verdict per comparison. The toys themselves come
from circuitloc.plan.sweep."""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc import metrics as M
from circuitloc import stats as S
from circuitloc.io import frame
from circuitloc.metrics import heads_to_label, heads_to_measures
from circuitloc.report.analysis import behaves
from circuitloc.report.tables import top_head_measure


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
METRICS = ("top_head_pct", "curve_area", "top_share", "effective_units")
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


def paired(pm, ci: float = 0.95, alpha: float = 0.05, p_adjust: str = "holm"):
    """Each KV-head count against the MHA model (kv = n_heads) of the same size and seed, on the
    seeds where both are `used` (passed their checks, show task behaviour, may report damage).
    Top head score and curve area (higher = more concentrated): mean difference, t-interval, paired
    t-test; the top head is tested only when both sides' scores are held out (`top_head_prompts`).
    Heads-to-threshold as a fraction (lower = more concentrated; '> K' censored), greedy (the
    paper's) and ranked: wins, losses and ties of the fewer-KV model, and an exact sign-flip test on
    Gehan scores. Every p-value of the table is adjusted together (`p_adjust`: holm, or bh).
    `direction_top_head` and `direction_heads_to` (+1: fewer KV heads more concentrated) and
    `verdict_heads_to` (which heads-to measure) are written beside `verdict` (`verdict`), so the
    overview reads the same directions."""


    def by_seed(df, seeds):  # the rows of df for these seeds, in this order
        return pl.DataFrame({"seed": pl.Series(seeds, dtype=df["seed"].dtype)}).join(
            df, on="seed", how="left", maintain_order="left")

    measures = heads_to_measures(pm.columns)
    paper = measures[-1] if measures else None  # greedy when present: the paper's heads-to
    rows = []
    for (size,), g in pm.group_by("size", maintain_order=True):
        mha_kv = _mha_kv(g)
        base = g.filter(pl.col("kv_heads") == mha_kv)
        for kv in sorted(g["kv_heads"].unique().to_list(), reverse=True):
            if kv == mha_kv:
                continue
            other = g.filter(pl.col("kv_heads") == kv)
            seeds = _pair_seeds(g, int(kv), mha_kv)
            b, o = by_seed(base, seeds), by_seed(other, seeds)
            row = {"size": size, "kv_heads": int(kv), "vs_kv_heads": mha_kv, "n_pairs": len(seeds),
                   "seeds": " ".join(map(str, seeds)), "clean_metric": g["clean_metric"][0]}
            for m in ("clean", "top_head_pct", "curve_area"):
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
            row.update({"curve_area_diff": mean, "curve_area_diff_lo": lo, "curve_area_diff_hi": hi,
                        "curve_area_p": p})
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
            row["direction_heads_to"] = row[f"{paper}_direction"] if paper else 0
            rows.append(row)
    df = frame(rows)
    if len(df) == 0:
        return df
    tests = paired_tests(df.columns)
    values = np.column_stack([_floats(df[c]) for c in tests])
    adj = S.P_ADJUST[p_adjust](values.ravel()).reshape(len(df), len(tests))
    for j, col in enumerate(tests):
        df = df.insert_column(df.columns.index(col) + 1, pl.Series(f"{col}_{p_adjust}", adj[:, j], dtype=pl.Float64))
    df = df.with_columns(n_tests=pl.lit(int(np.isfinite(values).sum()), pl.Int64),
                         verdict_heads_to=pl.lit(paper or "", pl.String))
    verdicts = [verdict(r, p_adjust, alpha, p_adjust) for r in df.iter_rows(named=True)]
    return df.with_columns(verdict=pl.Series(verdicts, dtype=pl.String))


def paired_tests(columns) -> list[str]:
    """The p-value columns of a paired table, in order: top head, curve area, each heads-to measure."""
    hs = heads_to_measures([c.removesuffix("_frac_p") for c in columns if c.endswith("_frac_p")])
    return [c for c in ("top_head_pct_p", "curve_area_p") if c in columns] + [f"{h}_frac_p" for h in hs]


def _sign(x) -> int:

    return int(np.sign(x)) if x is not None and np.isfinite(x) else 0


def _finite(col):

    x = _floats(col)
    return x[np.isfinite(x)]


def verdict(row: dict, suffix: str, alpha: float, p_adjust: str = "holm") -> str:
    """The one verdict of a paired comparison, from a paired-table row: its directions
    (`direction_top_head`, `direction_heads_to`: +1 = fewer KV heads more concentrated) and the
    p-values of those two tests adjusted as `suffix` says (`holm` / `bh` within the table, `all`
    over every table). 'yes' / 'no' when at least one is significant and both point the same way;
    'mixed' when one is significant and they do not (the other points the other way or nowhere);
    else no clear difference. The curve area is reported, adjusted, and not part of it."""

    if (row.get("n_pairs") or 0) < 2:
        return ("n/a: fewer than 2 seeds where both models passed their checks, show task behaviour and may "
                "report damage (clean above its floor)")
    paper = row.get("verdict_heads_to") or ""
    ps = [row.get(f"top_head_pct_p_{suffix}"), row.get(f"{paper}_frac_p_{suffix}") if paper else None]
    dirs = [int(row.get("direction_top_head") or 0), int(row.get("direction_heads_to") or 0)]
    sig = any(p is not None and np.isfinite(p) and p < alpha for p in ps)
    label = p_adjust
    if not sig:
        return f"no clear difference ({label}-adjusted alpha {alpha})"
    if dirs == [1, 1]:
        return "fewer KV heads more concentrated: yes"
    if dirs == [-1, -1]:
        return "fewer KV heads more concentrated: no (less concentrated)"
    return f"mixed: significant, but top head {_word(dirs[0])} and heads-to {_word(dirs[1])} ({label}-adjusted alpha {alpha})"


def _word(d: int) -> str:
    return {1: "says fewer KV more concentrated", -1: "says fewer KV less concentrated"}.get(d, "says neither")


def overview(tables: dict, alpha: float = 0.05, p_adjust: str = "holm"):
    """Every paired comparison of the sweep in one table, {(task, ablation): paired table}: what
    the README quotes. Each p-value is given raw, adjusted within its own table (as there) and
    adjusted over every test of every table (`_all`); `verdict_table` is the table's verdict and
    `verdict_all` the same function (`verdict`) on the same directions with the `_all` p-values,
    so the two differ only by the adjustment. A task key may carry a metric ('facts (accuracy)'),
    so that both facts metrics of a sweep are adjusted together."""


    keep = ["size", "kv_heads", "vs_kv_heads", "n_pairs", "clean_metric", "mha_clean", "clean",
            "mha_top_head_pct", "top_head_pct", "top_head_pct_diff", "top_head_pct_diff_lo", "top_head_pct_diff_hi",
            "top_head_prompts", "mha_curve_area", "curve_area", "curve_area_diff", "curve_area_diff_lo",
            "curve_area_diff_hi", "direction_top_head", "direction_curve_area", "direction_heads_to",
            "verdict_heads_to"]
    tests = []
    for df in tables.values():
        tests += [t for t in paired_tests(df.columns) if t not in tests]
    rows = []
    for (task, ablation), df in tables.items():
        for r in df.iter_rows(named=True):
            row = {"task": task, "unit": ablation.split("-", 1)[1], "ablation": ablation,
                   **{k: r.get(k) for k in keep}}
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
                row[f"{t}_table"] = r.get(f"{t}_{p_adjust}")
            row["verdict_table"] = r.get("verdict")
            rows.append(row)
    out = frame(rows)
    if len(out) == 0:
        return out

    def num(col):
        return np.array([np.nan if v is None else float(v) for v in out[col].to_list()])

    values = np.column_stack([num(t) for t in tests])
    adj = S.P_ADJUST[p_adjust](values.ravel()).reshape(values.shape)
    for j, t in enumerate(tests):
        out = out.insert_column(out.columns.index(f"{t}_table") + 1, pl.Series(f"{t}_all", adj[:, j], dtype=pl.Float64))
    verdicts = [verdict(r, "all", alpha, p_adjust) for r in out.iter_rows(named=True)]
    n = int(np.isfinite(values).sum())
    return out.with_columns(verdict_all=pl.Series(verdicts, dtype=pl.String), n_tests_all=pl.lit(n, pl.Int64))


def M_label(value: float, bounded: bool) -> str:
    """A median heads-to fraction as the one heads-to formatter writes it ('0.25', '> 0.5')."""

    return heads_to_label(float(f"{value:.3g}"), bounded)
