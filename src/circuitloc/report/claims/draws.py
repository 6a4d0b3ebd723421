"""The two claims judged on draws and resamples rather than on one number per model: the random
control (each random unit drawn, judged by the one that did most damage, with its interval over
prompts) and easy against hard inputs (the top unit of each half, with how often a bootstrap
resample of the half's prompts picks it)."""

from __future__ import annotations

import math

import polars as pl

from circuitloc.report.claims.pairing import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    UNTESTABLE,
    Claim,
    Run,
    missing,
    one_seed,
    real,
    row_of,
    split_pairs,
)
from circuitloc.plan.jobs.targets import CLAIM_TABLES

IOI_T2, IOI_STAB = CLAIM_TABLES[1], CLAIM_TABLES[3]
CONTROL_HARMLESS = 5.0  # "no damage": every random unit's damage below 5% of the clean - floor span
MIN_HALF = 20  # prompts per half below which an easy/hard top unit is noise (a 5-prompt half is)
SUPPORT = 0.8  # a half's top unit "dominates" when at least 80% of the half's resamples pick it


def random_heads_harmless(run: Run) -> dict:
    """Judged on every draw's interval at once (Bonferroni: each at level 1 - 0.05 / draws, Table 2's
    control_adj_*), the same way in both directions: does not hold when some draw's lower bound
    reaches CONTROL_HARMLESS, holds when every draw's upper bound stays below it, otherwise
    inconclusive (and so without an interval). The largest draw's point estimate decides nothing:
    the largest of ten draws is inflated by the selection (ten units truly at 3%, each measured
    with a standard error of 1%, reach 5% one run in five)."""
    text = (f"Single random units from the control's layers (Table 2's control_rule) do no damage: each draw "
            f"removes less than {CONTROL_HARMLESS:g}% of the IOI logit difference (zero ablation)")
    claim = Claim("ioi_random_heads_harmless", text, testable="control draws (curves.control_draws > 0) on curve "
                  "prompts with a bootstrap (bootstrap:), so that every draw has an interval; more curve "
                  "prompts (tasks.ioi.n_curve) narrow them")
    if why := missing(run, IOI_T2):
        return Claim(claim.cid, text, reason=why, testable=claim.testable).row()
    rows = [r for r in run.table(IOI_T2).iter_rows(named=True) if math.isfinite(real(r.get("control_drop_pct_max")))]
    if not rows:
        return Claim(claim.cid, text, reason="no model has a control draw", testable=claim.testable).row()
    parts, ivals, harm, open_, bare = [], [], [], [], []
    for r in rows:
        top, lo, hi = real(r["control_drop_pct_max"]), real(r.get("control_max_drop_pct_lo")), \
            real(r.get("control_max_drop_pct_hi"))
        adj_lo, adj_hi, level = real(r.get("control_adj_drop_pct_lo")), real(r.get("control_adj_drop_pct_hi")), \
            real(r.get("control_adj_level_pct"))
        parts.append(f"{r['model']}: largest of {r.get('control_draws')} draws {top:.1f}% "
                     f"(mean {real(r.get('control_drop_pct_mean')):.1f}%)")
        if math.isnan(adj_lo) or math.isnan(adj_hi):
            bare.append(r["model"])
            continue
        ivals.append(f"{r['model']}: largest draw [{lo:.1f}, {hi:.1f}]; every draw at {level:.3g}%: "
                     f"lower bounds <= {adj_lo:.1f}, upper bounds <= {adj_hi:.1f}")
        if adj_lo >= CONTROL_HARMLESS:
            harm.append(r["model"])
        elif adj_hi >= CONTROL_HARMLESS:
            open_.append(r["model"])
    verdict = FAILS if harm else INCONCLUSIVE if open_ or bare else HOLDS
    rules = "; ".join(dict.fromkeys(str(r.get("control_rule")) for r in rows if r.get("control_rule")))
    why = {FAILS: f"some draw's lower bound reaches {CONTROL_HARMLESS:g}% ({', '.join(harm)})",
           HOLDS: f"every draw's upper bound stays below {CONTROL_HARMLESS:g}%",
           INCONCLUSIVE: "; ".join(
               ([f"a draw's interval reaches across {CONTROL_HARMLESS:g}% ({', '.join(open_)})"] if open_ else [])
               + ([f"no interval for {', '.join(bare)} (run without a bootstrap)"] if bare else []))}[verdict]
    reason = (f"judged on every draw's interval at once, each at the Bonferroni level 1 - 0.05 / draws (Table 2's "
              f"control_adj_*): does not hold when a lower bound reaches {CONTROL_HARMLESS:g}%, holds when every "
              f"upper bound stays below, else inconclusive; {why}; drawn: {rules or 'control_rule not recorded'}")
    return Claim(claim.cid, text, tuple(r["model"] for r in rows), "; ".join(parts), "; ".join(ivals), verdict,
                 reason, claim.testable).row()


def _half_answer(r: dict) -> str:
    """same / different (each half's top unit picked in >= SUPPORT of its resamples), else
    'no dominant unit'; 'too few prompts' below MIN_HALF in a half."""
    if min(real(r.get("n_a")), real(r.get("n_b"))) < MIN_HALF or not r.get("top_a"):
        return "too few prompts"
    fa, fb = real(r.get("a_top_freq")), real(r.get("b_top_freq"))
    if not (fa >= SUPPORT and fb >= SUPPORT):
        return "no dominant unit"
    return "same" if r.get("same_top") in (True, "True", "true") else "different"


def same_head_easy_hard(run: Run) -> dict:
    """Per matched pretrained pair: GQA 'same' and MHA 'different' holds; GQA 'different' or MHA
    'same' does not; anything else (a half under MIN_HALF prompts, a top unit below SUPPORT) is
    not testable. Toy pairs are one seed (`one_seed`)."""
    text = "The same head dominates across easy and hard IOI inputs in GQA but not in MHA"
    claim = Claim("ioi_same_head_easy_hard", text, testable=f"a matched pretrained MHA/GQA pair with at least "
                  f"{MIN_HALF} scoring prompts in each clean-LD half (tasks.ioi.n_score >= {2 * MIN_HALF}); toy "
                  "pairs only across the sweep's seeds")
    if why := missing(run, IOI_STAB):
        return Claim(claim.cid, text, reason=why, testable=claim.testable).row()
    st = run.table(IOI_STAB)
    st = st.filter((pl.col("split") == "clean LD") & (pl.col("ablation") == "zero-query")) \
        if {"split", "ablation"} <= set(st.columns) else st
    pairs, toys, rule = split_pairs(run)
    if not pairs:
        return one_seed(claim, toys) if toys else Claim(
            claim.cid, text, reason=f"no MHA and GQA models of matched scale ({rule})", testable=claim.testable).row()
    parts, used, answers = [], [], []
    for p in pairs:
        a, b = row_of(st, p.mha), row_of(st, p.gqa)
        if not a or not b:
            continue
        ma, gb = _half_answer(a), _half_answer(b)
        answers.append((ma, gb))
        used += [p.mha, p.gqa]
        parts.append(f"{p.label}: GQA {gb} ({b.get('top_a')}/{b.get('top_b')}, n {b.get('n_a')}/{b.get('n_b')}), "
                     f"MHA {ma} ({a.get('top_a')}/{a.get('top_b')}, n {a.get('n_a')}/{a.get('n_b')})")
    if not used:
        return Claim(claim.cid, text, reason="no matched pair has the low/high clean-LD split",
                     testable=claim.testable).row()
    if any(g == "different" or m == "same" for m, g in answers):
        verdict = FAILS
    else:
        verdict = HOLDS if all(g == "same" and m == "different" for m, g in answers) else UNTESTABLE
    freqs = "; ".join(f"{m}: {real(r.get('a_top_freq')):.2f}/{real(r.get('b_top_freq')):.2f}"
                      for m in used if (r := row_of(st, m)))
    return Claim(claim.cid, text, tuple(used), "; ".join(parts), freqs, verdict,
                 f"top unit of the low- and high-clean-LD halves of the scoring prompts; interval: the share of "
                 f"bootstrap resamples of each half that pick that half's top unit; a half's top dominates at "
                 f">= {SUPPORT:g}, and a half needs >= {MIN_HALF} prompts; {rule}", claim.testable).row()
