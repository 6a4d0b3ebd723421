"""The controlled experiment: toy models that differ only in their number of key/value heads,
trained with one recipe over several seeds and sizes, and what the seeds say together.

A `sweep:` config block expands into ordinary toy models (every stage treats them like any other
model); `summarize` turns their Table 1 rows into means and intervals across seeds and paired
comparisons against the MHA model of the same seed and size.
"""

from __future__ import annotations

from .errors import ConfigError

# numpy, polars and scipy are imported where used: the Snakefile imports `expand` at parse time,
# in whatever Python runs Snakemake.

META = "sweep"  # the key under which an expanded model carries its (size, kv_heads, seed)


def model_name(prefix: str, size: str, kv: int, seed: int) -> str:
    return f"{prefix}_{size}_kv{kv}_s{seed}"


# Per-size keys that are not architecture fields.
SIZE_KEYS = ("kv_heads", "match_params")


def kv_params(d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """Key and value projection parameters of one toy layer (Qwen2: weights and biases)."""
    d_head = d_model // n_heads
    return 2 * n_kv_heads * d_head * (d_model + 1)


def matched_d_mlp(arch: dict, kv: int) -> int:
    """The MLP width that gives back what fewer KV heads take away: a gated MLP has 3 d_model
    parameters per unit of width, so KV 1 of 8 at d_model 128 (d_head 32) gets +64.5 -> +64
    units per layer. Rounding leaves at most 1.5 d_model parameters per layer."""
    d_model, heads = int(arch["d_model"]), int(arch["n_heads"])
    removed = kv_params(d_model, heads, heads) - kv_params(d_model, heads, kv)
    return int(arch["d_mlp"]) + round(removed / (3 * d_model))


def expand(sweep: dict) -> dict:
    """{model name: model spec}: one toy per size x KV-head count x seed. The recipe is shared; a
    size sets only architecture fields; a model differs from its siblings only in n_kv_heads, seed
    and its size's fields. Models of one size and seed form a family (the controlled set).

    A size may name its own `kv_heads` (for example 4, 2, 1 for 4 query heads of width 32) and
    `match_params: true`: then each model's MLP is widened by what its fewer KV heads removed
    (`matched_d_mlp`), so attention type is separated from parameter count."""
    prefix = sweep.get("prefix", "sweep")
    recipe = dict(sweep["recipe"])
    for key in ("n_kv_heads", "seed"):
        if key in recipe:
            raise ConfigError(f"sweep.recipe.{key}: set by the sweep itself (sweep.kv_heads / sweep.seeds)")
    extra = dict(sweep.get("model", {}))  # model-level keys for every sweep model (tasks, curves, ablation)
    out = {}
    for size, arch in sweep["sizes"].items():
        toy = {**recipe, **{k: v for k, v in arch.items() if k not in SIZE_KEYS}}
        heads = int(toy.get("n_heads", 8))
        kv_list = arch.get("kv_heads", sweep["kv_heads"])
        field = f"sweep.sizes.{size}.kv_heads" if "kv_heads" in arch else "sweep.kv_heads"
        if max(int(k) for k in kv_list) != heads:
            raise ConfigError(f"{field}: {list(kv_list)} has no MHA model (n_kv_heads = n_heads = {heads}), "
                              f"which the paired comparisons of size {size!r} need")
        for kv in kv_list:
            if heads % int(kv):
                raise ConfigError(f"{field}: {kv} does not divide n_heads = {heads} (size {size!r})")
            shape = dict(toy)
            if arch.get("match_params"):
                for key in ("d_model", "d_mlp"):
                    if key not in shape:
                        raise ConfigError(f"sweep.sizes.{size}: match_params needs {key} in the size or the recipe")
                shape["d_mlp"] = matched_d_mlp({**shape, "n_heads": heads}, int(kv))
            for seed in sweep["seeds"]:
                out[model_name(prefix, size, int(kv), int(seed))] = {
                    **extra, "source": "toy", "family": f"{prefix}_{size}_s{seed}",
                    "toy": {**shape, "n_kv_heads": int(kv), "seed": int(seed)},
                    META: {"size": size, "kv_heads": int(kv), "seed": int(seed)}}
    return out


def figure_sample(models: dict, names: list, max_models: int) -> list:
    """Which of `names` (models of one figure, in config order) get a panel when a figure may show
    at most `max_models`: every model that is not from a sweep, then sweep toys lowest seed first
    (within a seed, in `names` order, which is the sweep's size x KV order), until `max_models`. The
    chosen keep their `names` order. Deterministic, and with one toy per (size, KV) cell before any
    cell gets a second, where max_models allows."""
    if max_models < 1:
        raise ConfigError(f"figures.max_models: must be at least 1, got {max_models}")
    if len(names) <= max_models:
        return list(names)
    rank = {n: (0, 0, i) if META not in models[n] else (1, int(models[n][META]["seed"]), i)
            for i, n in enumerate(names)}
    chosen = set(sorted(names, key=rank.__getitem__)[:max_models])
    return [n for n in names if n in chosen]


def _interval(x, ci: float):
    """Mean and a t-interval across seeds (NaN bounds for a single seed). Never given a censored
    value: the callers pass uncensored measures only."""
    import numpy as np
    from scipy import stats

    x = np.asarray(x, float)
    m = float(np.mean(x)) if len(x) else np.nan
    if len(x) < 2:
        return m, np.nan, np.nan
    half = stats.t.ppf(0.5 + ci / 2, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - half, m + half


def per_model(table1, meta: dict, passed: dict, task: str | None = None):
    """One row per sweep model of a Table 1: its size, KV heads, seed, whether it passed its checks
    (`accepted`) and shows task behaviour (clean metric better than its floor; e.g. IOI logit
    difference > 0), its clean metric and measures. A bounded ('> K') heads-to-80% is kept as its bound K with
    heads_to_80_censored = True; heads_to_80 and heads_to_80_frac hold observed values only (NaN
    for a censored curve)."""
    import numpy as np
    import polars as pl

    from . import metrics as M
    from .analysis import behaves
    from .io import frame
    from .tables import top_head_measure

    clean_col = next((c for c in table1.columns if c.startswith("baseline_")), None)
    task = task or {"baseline_ld": "ioi", "baseline_icl_loss": "induction"}.get(clean_col, "facts")
    ok = behaves(table1, task)
    rows = []
    for i, r in enumerate(table1.iter_rows(named=True)):
        if r["model"] not in meta:
            continue
        h80 = {}
        for base in heads_to_measures(table1.columns):  # ranked, and greedy where the curves have it
            count, frac, censored = M.heads_to_censored(r[base], r[f"{base}_bounded"], r["n_units"])
            h80.update({base: np.nan if censored else count, f"{base}_frac": np.nan if censored else frac,
                        f"{base}_censored": censored, f"{base}_bound": count if censored else np.nan,
                        f"{base}_frac_bound": frac if censored else np.nan})
        top, top_prompts = top_head_measure(r)  # held out where the curves were
        rows.append({**meta[r["model"]], "model": r["model"], "accepted": bool(passed.get(r["model"], True)),
                     "task_behaviour": bool(ok[i]), "clean_metric": clean_col.removeprefix("baseline_") if clean_col else "",
                     "clean": _num(r[clean_col]) if clean_col else np.nan,
                     "top_head_pct": _num(r[top]), "top_head_prompts": top_prompts,
                     "top_head_pct_lo": _num(r.get(f"{top}_lo")),
                     "top_head_pct_hi": _num(r.get(f"{top}_hi")),
                     **h80,
                     "effective_units": _num(r["effective_units"]), "top_share": _num(r["top_share"]),
                     "n_units": int(r["n_units"])})
    pm = frame(rows)
    if len(pm):
        pm = pm.with_columns(used=pl.col("accepted") & pl.col("task_behaviour"))
    return pm


def _num(v) -> float:
    """A table cell as a float: empty (null) is NaN."""
    return float("nan") if v is None else float(v)


METRICS = ("top_head_pct", "top_share", "effective_units")  # uncensored: mean and t-interval across seeds
# heads-to-80% on the ranked curve and on the greedy curve (the paper's): may be '> K', so a median
# (or bound) and a censored count, never a mean over made-up values
HEADS_TO = ("heads_to_80", "heads_to_80_greedy")


def heads_to_measures(columns) -> list[str]:
    """The heads-to-80% measures a table has: ranked always, greedy when its curves had one."""
    return [m for m in HEADS_TO if m in columns]


def _values(g, m):
    """(value or bound, censored) of a censorable measure (a count or its _frac), one per row of g."""
    import numpy as np

    censored = g[f"{m.removesuffix('_frac')}_censored"].to_numpy().astype(bool)
    v = np.where(censored, _floats(g[f"{m}_bound"]), _floats(g[m]))
    return v, censored


def _floats(col):
    """A column as a float array, null as NaN."""
    import numpy as np

    return np.asarray(col.cast(float).to_numpy(), float)


def _describe(g, ci: float, prefix: str = "") -> dict:
    """Mean and t-interval of the clean metric and uncensored measures over the rows of g; for
    heads-to-80% the censored count, and the mean and t-interval only when nothing is censored,
    else NaN (the median, flagged when it is a lower bound, is given either way)."""
    import numpy as np

    from . import stats as S

    row = {}
    for m in ("clean",) + METRICS:
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
    import polars as pl

    ok = lambda k: set(g.filter((pl.col("kv_heads") == k) & pl.col("used"))["seed"].to_list())  # noqa: E731
    return sorted(ok(kv) & ok(mha_kv))


def summarize(pm, ci: float = 0.95):
    """Per size and KV-head count: mean and interval across seeds, over the seeds that enter this
    KV-head count's paired comparison with MHA (both passed their checks and show task behaviour),
    so a row and its paired test describe the same toys. Counted, not used: toys that failed their
    checks (excluded_seeds) and toys without task behaviour (no_behaviour_seeds)."""
    import polars as pl

    from .io import frame

    rows = []
    for (size,), gs in pm.group_by("size", maintain_order=True):
        mha_kv = _mha_kv(gs)
        for (kv,), g in gs.group_by("kv_heads", maintain_order=True):
            seeds = _pair_seeds(gs, int(kv), mha_kv)
            used = g.filter(pl.col("seed").is_in(seeds))
            row = {"size": size, "kv_heads": int(kv), "n_seeds": len(seeds), "seeds": " ".join(map(str, seeds)),
                   "excluded_seeds": int((~g["accepted"]).sum()),
                   "no_behaviour_seeds": int((g["accepted"] & ~g["task_behaviour"]).sum()),
                   "n_units": int(g["n_units"][0]), "clean_metric": g["clean_metric"][0],
                   **_describe(used, ci)}
            rows.append(row)
    return frame(rows).sort(["size", "kv_heads"], descending=[False, True], maintain_order=True)


def paired(pm, ci: float = 0.95, alpha: float = 0.05, p_adjust: str = "holm"):
    """Each KV-head count against the MHA model (kv = n_heads) of the same size and seed, on the
    seeds where both passed their checks and show task behaviour (both sides' means over exactly
    those seeds). Top head score (higher = more concentrated): mean difference, t-interval, paired
    t-test. Heads-to-80% as a fraction (lower = more concentrated; '> K' censored), on the greedy
    curve (the paper's) and on the ranked curve: wins, losses and ties of the fewer-KV model, and an
    exact sign-flip test on Gehan scores (censored values rank above every observed value at or below
    their bound; two censored values tie). Every p-value of the table is adjusted together
    (`p_adjust`: holm, or bh). The verdict reads the top head score and the paper's heads-to-80%
    (greedy where the sweep drew greedy curves, else ranked), with adjusted p; the other is shown."""
    import numpy as np
    import polars as pl
    from scipy import stats

    from . import stats as S
    from .io import frame

    def by_seed(df, seeds):  # the rows of df for these seeds, in this order
        return pl.DataFrame({"seed": pl.Series(seeds, dtype=df["seed"].dtype)}).join(
            df, on="seed", how="left", maintain_order="left")

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
            for m in ("clean", "top_head_pct"):
                row[f"mha_{m}"], row[f"mha_{m}_lo"], row[f"mha_{m}_hi"] = _interval(_floats(b[m]), ci)
                row[m], row[f"{m}_lo"], row[f"{m}_hi"] = _interval(_floats(o[m]), ci)
            d = _floats(o["top_head_pct"]) - _floats(b["top_head_pct"])
            mean, lo, hi = _interval(d, ci)
            p = float(stats.ttest_rel(_floats(o["top_head_pct"]), _floats(b["top_head_pct"])).pvalue) \
                if len(seeds) > 1 and np.std(d) > 0 else np.nan
            row.update({"top_head_pct_diff": mean, "top_head_pct_diff_lo": lo, "top_head_pct_diff_hi": hi,
                        "top_head_pct_p": p})
            for h in heads_to_measures(g.columns):
                m = f"{h}_frac"
                for side, t in (("mha_", b), ("", o)):
                    row[f"{side}{m}_median"], row[f"{side}{m}_median_is_bound"] = S.censored_median(*_values(t, m))
                test = S.paired_censored(*_values(b, m), *_values(o, m))
                row.update({f"{m}_wins": test["wins"], f"{m}_losses": test["losses"], f"{m}_ties": test["ties"],
                            f"{m}_p": test["p"], f"_{h}_stat": test["stat"],
                            f"{h}_censored_pairs": int((b[f"{h}_censored"].to_numpy().astype(bool)
                                                           | o[f"{h}_censored"].to_numpy().astype(bool)).sum())})
            rows.append(row)
    df = frame(rows)
    if len(df) == 0:
        return df
    measures = heads_to_measures(pm.columns)
    paper = measures[-1]  # greedy when present: the paper's heads-to-80%
    tests = ("top_head_pct_p",) + tuple(f"{h}_frac_p" for h in measures)
    values = np.column_stack([_floats(df[c]) for c in tests])
    adj = S.P_ADJUST[p_adjust](values.ravel()).reshape(len(df), len(tests))
    for j, col in enumerate(tests):
        df = df.insert_column(df.columns.index(col) + 1, pl.Series(f"{col}_{p_adjust}", adj[:, j], dtype=pl.Float64))
    df = df.with_columns(n_tests=pl.lit(int(np.isfinite(values).sum()), pl.Int64))
    verdicts = [_verdict([(np.sign(r["top_head_pct_diff"]), r[f"top_head_pct_p_{p_adjust}"]),
                          (-np.sign(r[f"_{paper}_stat"]), r[f"{paper}_frac_p_{p_adjust}"])],
                         alpha, p_adjust, r["n_pairs"]) for r in df.iter_rows(named=True)]
    return df.with_columns(verdict=pl.Series(verdicts, dtype=pl.String),
                           verdict_heads_to=pl.lit("greedy" if paper.endswith("greedy") else "ranked", pl.String)
                           ).drop([f"_{h}_stat" for h in measures])


def _verdict(signs, alpha, p_adjust="holm", n_pairs=2) -> str:
    """'more concentrated: yes' when both measures point to fewer KV heads and at least one is
    significant after adjustment; 'no' when both point the other way with one significant; else no
    clear difference. signs: (direction, +1 = fewer KV heads more concentrated; adjusted p)."""
    import numpy as np

    if n_pairs < 2:
        return "n/a: fewer than 2 seeds where both models passed their checks and show task behaviour"
    dirs = {float(s) for s, _ in signs}
    sig = any(np.isfinite(p) and p < alpha for _, p in signs)
    if sig and dirs == {1.0}:
        return "fewer KV heads more concentrated: yes"
    if sig and dirs == {-1.0}:
        return "fewer KV heads more concentrated: no (less concentrated)"
    return f"no clear difference ({p_adjust}-adjusted alpha {alpha})"


OVERVIEW_TESTS = ("top_head_pct_p", "heads_to_80_greedy_frac_p", "heads_to_80_frac_p")


def overview(tables: dict, alpha: float = 0.05, p_adjust: str = "holm"):
    """Every paired comparison of the sweep in one table, {(task, ablation): paired table}: what
    the README quotes. Each p-value is given raw, adjusted within its own table (as there) and
    adjusted over every test of every table (`p_all`), and the verdict is read again from the
    latter, so a conclusion across tasks and units is no stronger than all its tests together.
    Heads-to-80% direction: wins minus losses of the fewer-KV model (a win: fewer units to 80%)."""
    import numpy as np
    import polars as pl

    from . import stats as S
    from .io import frame

    keep = ["size", "kv_heads", "vs_kv_heads", "n_pairs", "clean_metric", "mha_clean", "clean",
            "mha_top_head_pct", "top_head_pct", "top_head_pct_diff", "top_head_pct_diff_lo", "top_head_pct_diff_hi"]
    rows = []
    for (task, ablation), df in tables.items():
        for r in df.iter_rows(named=True):
            row = {"task": task, "unit": ablation.split("-", 1)[1], "ablation": ablation,
                   **{k: r.get(k) for k in keep}}
            for h in ("heads_to_80_greedy", "heads_to_80"):
                m = f"{h}_frac"
                for side in ("mha_", ""):
                    med, bound = r.get(f"{side}{m}_median"), r.get(f"{side}{m}_median_is_bound")
                    row[f"{side}{h}_median"] = None if med is None or (isinstance(med, float) and np.isnan(med)) \
                        else (f"> {med:.3g}" if str(bound) in ("True", "true") else f"{med:.3g}")
                row[f"{h}_wins_losses_ties"] = f"{r.get(f'{m}_wins')}/{r.get(f'{m}_losses')}/{r.get(f'{m}_ties')}"
            for t in OVERVIEW_TESTS:
                row[t] = r.get(t)
                row[f"{t}_table"] = r.get(f"{t}_{p_adjust}")
            row["verdict_table"] = r.get("verdict")
            rows.append(row)
    out = frame(rows)
    if len(out) == 0:
        return out

    def num(col):
        return np.array([np.nan if v is None else float(v) for v in out[col].to_list()])

    values = np.column_stack([num(t) for t in OVERVIEW_TESTS])
    adj = S.P_ADJUST[p_adjust](values.ravel()).reshape(values.shape)
    for j, t in enumerate(OVERVIEW_TESTS):
        out = out.insert_column(out.columns.index(f"{t}_table") + 1, pl.Series(f"{t}_all", adj[:, j], dtype=pl.Float64))
    verdicts = []
    for i, r in enumerate(out.iter_rows(named=True)):
        w, lo, _ = (int(x) if x not in ("None", "") else 0 for x in r["heads_to_80_greedy_wins_losses_ties"].split("/"))
        signs = [(np.sign(r["top_head_pct_diff"] or 0.0), adj[i, 0]), (np.sign(w - lo), adj[i, 1])]
        verdicts.append(_verdict(signs, alpha, p_adjust, r["n_pairs"] or 0))
    n = int(np.isfinite(values).sum())
    return out.with_columns(verdict_all=pl.Series(verdicts, dtype=pl.String), n_tests_all=pl.lit(n, pl.Int64))
