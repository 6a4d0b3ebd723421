"""Each sweep comparison's minimum detectable effect (MDE), beside its verdict in the overview.

A verdict "yes" needs both its tests significant after adjustment. For a comparison whose
difference stands alone in its family of N tests (every other test null), its two tests are the
family's two smallest p-values: the smaller faces alpha / N (Holm; Benjamini-Hochberg 2 alpha / N
once the second passes), the second alpha / (N - 1) (Holm; BH 2 alpha / N): `plan.config.sweep_power.yes_threshold`.

- heads-to (the exact sign-flip test on Gehan differences): of its n pairs, `heads_to_untied_pairs`
  m have a nonzero difference (the rest, `heads_to_tied_pairs`, carry no sign and drop out); its
  smallest p is 2 / 2^m (`heads_to_min_p`), and `yes_reachable` says whether that is below the
  threshold. `mde_heads_to_concordant`: the fewest of the m pairs that must point one way for p to
  fall below the threshold when every difference has one size (the sign test); `mde_heads_to_share`:
  the chance per untied pair of pointing that way at which that many do with probability 0.8.
- top head (the paired t-test): `mde_top_head_sd`, the smallest mean difference, in standard
  deviations of the pairs' differences, that the two-sided t-test at alpha / N over the n pairs
  detects with probability 0.8 (noncentral t, exact under normal differences); `mde_top_head_pct`,
  the same in points of the clean span, with the observed standard deviation of the differences.

The heads-to figures are computed from the untied pairs the run had; the top head's from its pairs
and the observed spread, so an MDE is a property of this run's design and noise, not of the truth."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from circuitloc.plan.config.sweep_power import POWER, concordance_for_power, min_concordant, min_sign_flip_p, yes_threshold
from circuitloc.report.records import SweepStats
from circuitloc.report.sweep.summary import EXPLORATORY, PRIMARY

COLUMNS = ("yes_threshold", "yes_reachable", "heads_to_untied_pairs", "heads_to_tied_pairs", "heads_to_min_p",
           "mde_heads_to_concordant", "mde_heads_to_share", "mde_top_head_sd", "mde_top_head_pct")


def t_mde(n: int, level: float, power: float = POWER) -> float:
    """The smallest mean / sd of n paired differences that a two-sided paired t-test at `level`
    rejects with probability `power` (noncentral t with n - 1 degrees of freedom); NaN below 2 pairs."""
    import scipy.stats

    if n < 2 or not 0 < level < 1:
        return float("nan")
    df = n - 1
    crit = scipy.stats.t.ppf(1 - level / 2, df)

    def reach(d: float) -> float:
        nc = d * math.sqrt(n)
        got = scipy.stats.nct.sf(crit, df, nc) + scipy.stats.nct.cdf(-crit, df, nc)
        return float(got) if np.isfinite(got) else float(nc > crit)  # nct's far tail is NaN: power 0 or 1

    lo, hi = 0.0, 1.0
    while reach(hi) < power and hi < 1e6:
        lo, hi = hi, 2 * hi
    for _ in range(60):  # power grows with d: bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reach(mid) < power else (lo, mid)
    return hi


def first_level(alpha: float, n_tests: int, p_adjust: str) -> float:
    """The threshold the smaller of a lone comparison's two p-values faces (module docstring)."""
    return alpha / max(n_tests, 1) if p_adjust == "holm" else 2 * alpha / max(n_tests, 1)


def mde_row(r: dict, st: SweepStats) -> dict:
    """The COLUMNS of one overview row (None where the row has no verdict to detect)."""
    out = dict.fromkeys(COLUMNS)
    fam = r.get("verdict_family")
    n = int(r.get("n_pairs") or 0)
    if fam not in (PRIMARY, EXPLORATORY) or n < 2:
        return out
    n_tests = int(r.get(f"n_tests_{fam}_all") or 0)
    threshold = yes_threshold(st.alpha, n_tests, st.p_adjust)
    out["yes_threshold"] = threshold
    h = r.get("verdict_heads_to") or ""
    m = r.get(f"{h}_untied")
    if h and m is not None:
        m = int(m)
        k = min_concordant(m, threshold)
        out.update(heads_to_untied_pairs=m, heads_to_tied_pairs=n - m, heads_to_min_p=min_sign_flip_p(m),
                   yes_reachable=min_sign_flip_p(m) < threshold, mde_heads_to_concordant=k,
                   mde_heads_to_share=concordance_for_power(m, k))
    sd = r.get("top_head_pct_diff_sd")
    out["mde_top_head_sd"] = t_mde(n, first_level(st.alpha, n_tests, st.p_adjust))
    out["mde_top_head_pct"] = out["mde_top_head_sd"] * float(sd) if sd is not None and np.isfinite(sd) else None
    return out


def with_mde(out: pl.DataFrame, st: SweepStats) -> pl.DataFrame:
    """The overview with COLUMNS after `verdict_all` (and its stability, where it has one)."""
    if len(out) == 0:
        return out
    rows = [mde_row(r, st) for r in out.iter_rows(named=True)]
    types = {"yes_reachable": pl.Boolean, "heads_to_untied_pairs": pl.Int64, "heads_to_tied_pairs": pl.Int64,
             "mde_heads_to_concordant": pl.Int64}
    new = pl.DataFrame({c: pl.Series(c, [r[c] for r in rows], dtype=types.get(c, pl.Float64)) for c in COLUMNS})
    cols = [c for c in out.columns if c not in COLUMNS]
    anchor = next((c for c in ("verdict_all_stability", "verdict_all") if c in cols), cols[-1])
    at = cols.index(anchor) + 1
    return pl.concat([out.select(cols[:at]), new, out.select(cols[at:])], how="horizontal")
