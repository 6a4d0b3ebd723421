"""The controlled experiment: toy models that differ only in their number of key/value heads,
trained with one recipe over several seeds and sizes, and what the seeds say together.

A `sweep:` config block expands into ordinary toy models (every stage treats them like any other
model); `summarize` turns their Table 1 rows into means and intervals across seeds and paired
comparisons against the MHA model of the same seed and size.
"""

from __future__ import annotations

from .errors import ConfigError

# numpy, pandas and scipy are imported where used: the Snakefile imports `expand` at parse time,
# in whatever Python runs Snakemake.

META = "sweep"  # the key under which an expanded model carries its (size, kv_heads, seed)


def model_name(prefix: str, size: str, kv: int, seed: int) -> str:
    return f"{prefix}_{size}_kv{kv}_s{seed}"


def expand(sweep: dict) -> dict:
    """{model name: model spec}: one toy per size x KV-head count x seed. The recipe is shared; a
    size sets only architecture fields; a model differs from its siblings only in n_kv_heads, seed
    and its size's fields. Models of one size and seed form a family (the controlled set)."""
    prefix = sweep.get("prefix", "sweep")
    recipe = dict(sweep["recipe"])
    for key in ("n_kv_heads", "seed"):
        if key in recipe:
            raise ConfigError(f"sweep.recipe.{key}: set by the sweep itself (sweep.kv_heads / sweep.seeds)")
    extra = dict(sweep.get("model", {}))  # model-level keys for every sweep model (tasks, curves, ablation)
    out = {}
    for size, arch in sweep["sizes"].items():
        toy = {**recipe, **arch}
        heads = int(toy.get("n_heads", 8))
        for kv in sweep["kv_heads"]:
            if heads % int(kv):
                raise ConfigError(f"sweep.kv_heads: {kv} does not divide n_heads = {heads} (size {size!r})")
            for seed in sweep["seeds"]:
                out[model_name(prefix, size, int(kv), int(seed))] = {
                    **extra, "source": "toy", "family": f"{prefix}_{size}_s{seed}",
                    "toy": {**toy, "n_kv_heads": int(kv), "seed": int(seed)},
                    META: {"size": size, "kv_heads": int(kv), "seed": int(seed)}}
    return out


def heads_to_80_bound(row):
    """(count, fraction, bounded): '> K' becomes the lower bound K + 1."""
    raw = str(row["heads_to_80"])
    if raw.startswith(">"):
        k = int(raw[1:]) + 1
        return float(k), k / float(row["n_units"]), True
    return float(raw), float(row["heads_to_80_frac"]), False


def _interval(x, ci: float):
    """Mean and a t-interval across seeds (NaN bounds for a single seed)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(x, float)
    m = float(np.mean(x)) if len(x) else np.nan
    if len(x) < 2:
        return m, np.nan, np.nan
    half = stats.t.ppf(0.5 + ci / 2, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - half, m + half


def per_model(table1, meta: dict, passed: dict):
    """One row per sweep model of a Table 1: its size, KV heads, seed, acceptance and measures."""
    import pandas as pd

    rows = []
    for _, r in table1[table1["model"].isin(list(meta))].iterrows():
        count, frac, bounded = heads_to_80_bound(r)
        rows.append({**meta[r["model"]], "model": r["model"], "accepted": bool(passed.get(r["model"], True)),
                     "top_head_pct": float(r["top_head_pct"]), "heads_to_80": count, "heads_to_80_frac": frac,
                     "heads_to_80_bounded": bounded, "effective_units": float(r["effective_units"]),
                     "top_share": float(r["top_share"]),
                     "n_units": int(r["n_units"])})
    return pd.DataFrame(rows)


METRICS = ("top_head_pct", "heads_to_80", "heads_to_80_frac", "top_share", "effective_units")


def summarize(pm, ci: float = 0.95):
    """Per size and KV-head count: mean and interval across the accepted seeds."""
    import pandas as pd

    rows = []
    for (size, kv), g in pm.groupby(["size", "kv_heads"], sort=False):
        ok = g[g["accepted"]]
        row = {"size": size, "kv_heads": int(kv), "n_seeds": int(len(ok)), "excluded_seeds": int((~g["accepted"]).sum()),
               "n_units": int(g["n_units"].iloc[0]), "heads_to_80_bounded": int(ok["heads_to_80_bounded"].sum())}
        for m in METRICS:
            row[m], row[f"{m}_lo"], row[f"{m}_hi"] = _interval(ok[m], ci)
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["size", "kv_heads"], ascending=[True, False]).reset_index(drop=True)


def paired(pm, ci: float = 0.95, alpha: float = 0.05):
    """Each KV-head count against the MHA model (kv = n_heads) of the same size and seed: the mean
    difference across seeds with its t-interval and paired t-test p-value, for the top head score
    (higher = more concentrated) and heads-to-80% as a fraction (lower = more concentrated)."""
    import numpy as np
    import pandas as pd
    from scipy import stats

    rows = []
    for size, g in pm[pm["accepted"]].groupby("size", sort=False):
        mha_kv = int(g["kv_heads"].max())
        base = g[g["kv_heads"] == mha_kv].set_index("seed")
        for kv in sorted(g["kv_heads"].unique(), reverse=True):
            if kv == mha_kv:
                continue
            other = g[g["kv_heads"] == kv].set_index("seed")
            seeds = sorted(set(base.index) & set(other.index))
            row = {"size": size, "kv_heads": int(kv), "vs_kv_heads": mha_kv, "n_pairs": len(seeds)}
            signs = []
            for m, better in (("top_head_pct", 1), ("heads_to_80_frac", -1)):
                d = (other.loc[seeds, m] - base.loc[seeds, m]).to_numpy(float)
                mean, lo, hi = _interval(d, ci)
                p = float(stats.ttest_rel(other.loc[seeds, m], base.loc[seeds, m]).pvalue) \
                    if len(seeds) > 1 and np.std(d) > 0 else np.nan
                row.update({f"{m}_diff": mean, f"{m}_diff_lo": lo, f"{m}_diff_hi": hi, f"{m}_p": p})
                sig = np.isfinite(p) and p < alpha
                signs.append((np.sign(mean) * better, sig))
            row["heads_to_80_bounded_pairs"] = int((other.loc[seeds, "heads_to_80_bounded"].to_numpy()
                                                   | base.loc[seeds, "heads_to_80_bounded"].to_numpy()).sum())
            row["verdict"] = _verdict(signs, alpha)
            rows.append(row)
    return pd.DataFrame(rows)


def _verdict(signs, alpha) -> str:
    """'more concentrated: yes' when both measures point to fewer KV heads and at least one is
    significant; 'no' when both point the other way with one significant; else no clear difference."""
    dirs = {float(s) for s, _ in signs}
    if any(sig for _, sig in signs) and dirs == {1.0}:
        return "fewer KV heads more concentrated: yes"
    if any(sig for _, sig in signs) and dirs == {-1.0}:
        return "fewer KV heads more concentrated: no (less concentrated)"
    return f"no clear difference (paired t-test, alpha {alpha})"
