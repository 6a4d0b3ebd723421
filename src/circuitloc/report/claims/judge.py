"""The paper's claims beside this run's numbers: one row per claim of "Architecture, Not Scale"
(arXiv 2605.08853), the models of the run it applies to, the measured value with its interval, and
"holds" / "does not hold" / "inconclusive" (measured, but the intervals reach across the claim's
cut) / "not testable in this run" (or "not testable (one seed)" where only a toy pair could test it) with the reason and what would make it testable (`testable_when`). Computed
from the run's tables and model cards, never written by hand. The claims judged on draws and
resamples (the random control, easy against hard inputs) are in claims_draws.

Claims about pretrained model families apply to the run's pretrained models (source other than
`toy`) of the attention type the paper names, and say so beside the paper's own models; the
MHA-versus-GQA comparisons pair models as claims_pairing says (pretrained across families by
parameter count, toys within their family)."""

from __future__ import annotations

import math

import polars as pl

from circuitloc.metrics import heads_to_name
from circuitloc.plan.jobs.targets import CLAIM_TABLES
from circuitloc.report.claims.draws import CONTROL_HARMLESS, random_heads_harmless, same_head_easy_hard  # noqa: F401
from circuitloc.report.claims.pairing import (  # noqa: F401  (the claims' vocabulary, re-exported)
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    ONE_SEED,
    UNTESTABLE,
    Claim,
    Run,
    missing as _missing,
    one_seed,
    row_of as _row,
    split_pairs,
)
from circuitloc.report.tables.paper import as_float, ci_note, pct

IOI_T1, IOI_T2, FACTS_T1, IOI_STAB = CLAIM_TABLES  # the rule's inputs (plan.jobs.targets.claim_inputs)
RATIO_RANGE = (4.0, 8.0)  # the paper: GQA's top head 4-8x MHA's at matched scale
TOP_REMOVES = 89.6  # the paper: ablating the 7B's top head removes 89.6% of IOI


def _pct(run: Run) -> str:
    """The run's curve threshold as the claims word it: '80%' at 0.8."""
    return f"{100 * float(run.threshold):g}%"


def _no_interval(run: Run) -> str:
    return f"no interval: heads-to-{_pct(run)} is a count read off one greedy curve, which the tables do not bootstrap"


def _heads_to(row: dict, threshold: float) -> tuple[float, bool] | None:
    """(greedy heads-to-threshold at the run's threshold, bounded) of a Table 1 row, or None where the
    damage is not defined."""
    name = heads_to_name(threshold, "greedy")
    v = as_float(row.get(name))
    if math.isnan(v) or row.get("damage_ok") in (False, "False"):
        return None
    return v, row.get(f"{name}_bounded") in (True, "True")


def _ci_notes(rows: dict) -> str:
    """' (model: note; ...)' for the Table 1 rows ({model: row}) whose held-out top unit interval
    carries a note (`top_head_pct_heldout_ci_note`: widened, or may under-cover), else ''."""
    notes = [f"{m}: {n}" if len(rows) > 1 else n for m, r in rows.items()
             if (n := ci_note((r or {}).get("top_head_pct_heldout_ci_note")))]
    return f" ({'; '.join(notes)})" if notes else ""


def _label(v: float, bounded: bool) -> str:
    return f"> {v:g}" if bounded else f"{v:g}"


def _untestable(cid, text, reason, testable=""):
    return Claim(cid, text, reason=reason, testable=testable).row()


def _judged(run: Run, attention: str, table: str) -> tuple[dict, str]:
    """(model -> (heads-to-threshold, bounded), a note naming the models of that attention type left out)
    over the run's pretrained models of one attention type."""
    models = run.pretrained(attention)
    found = {m: h for m in models if (r := _row(run.table(table), m)) and (h := _heads_to(r, run.threshold))}
    gone = [m for m in models if m not in found]
    return found, (f"; left out (no row, or the clean value not above its floor): {', '.join(gone)}" if gone else "")


def _count_claim(run: Run, claim: Claim, attention: str, accept) -> dict:
    """A heads-to-threshold claim on every pretrained model of one attention type: `accept(count)` per model."""
    if (why := _missing(run, IOI_T1)) or not run.pretrained(attention):
        return _untestable(claim.cid, claim.text, why or f"no pretrained {attention.upper()} model in this run")
    found, gone = _judged(run, attention, IOI_T1)
    if not found:
        return _untestable(claim.cid, claim.text, f"no {attention.upper()} model's clean IOI logit difference "
                                                  f"lies above its floor{gone}")
    ok = all(accept(v) and not b for v, b in found.values())
    return Claim(claim.cid, claim.text, list(found), "; ".join(f"{m}: {_label(*h)}" for m, h in found.items()), "",
                 HOLDS if ok else FAILS, f"{claim.reason}{gone}; {_no_interval(run)}").row()


def gqa_one_unit(run: Run) -> dict:
    text = (f"One ablation gives {_pct(run)} IOI damage in every pretrained GQA model of this run (the paper: every "
            "Qwen2.5, 0.5B-7B; greedy, zero ablation of query heads)")
    return _count_claim(run, Claim("ioi_gqa_one_unit", text, reason="judged on every pretrained GQA model: "
                                   "each must need exactly 1"), "gqa", lambda v: v == 1)


def mha_two_to_five(run: Run) -> dict:
    text = (f"Every pretrained MHA model of this run needs 2-5 heads for {_pct(run)} IOI damage (the paper: Pythia "
            "160M-6.9B; greedy, zero ablation)")
    return _count_claim(run, Claim("ioi_mha_two_to_five", text, reason="judged on every pretrained MHA model "
                                   "(a toy MHA model is not one of the paper's): each must need 2-5"),
                        "mha", lambda v: 2 <= v <= 5)


def top_head_ratio(run: Run) -> dict:
    text = "GQA's top head score is 4-8x MHA's at matched scale (IOI, zero ablation, held-out prompts)"
    cid = "ioi_gqa_top_head_ratio"
    if why := _missing(run, IOI_T1):
        return _untestable(cid, text, why)
    pairs, toys, rule = split_pairs(run)
    if not pairs:  # a toy pair is one seed: its ratio describes two models, not the architectures
        return one_seed(Claim(cid, text), toys) if toys else \
            _untestable(cid, text, f"no MHA and GQA models of matched scale ({rule})")
    t1, parts, ratios, intervals, used = run.table(IOI_T1), [], [], [], []
    for p in pairs:
        a, b = _row(t1, p.mha), _row(t1, p.gqa)
        if not a or not b:
            continue
        ma, mb = as_float(a.get("top_head_pct_heldout")), as_float(b.get("top_head_pct_heldout"))
        if math.isnan(ma) or math.isnan(mb) or ma <= 0:
            continue
        lo_a, hi_a = as_float(a.get("top_head_pct_heldout_lo")), as_float(a.get("top_head_pct_heldout_hi"))
        lo_b, hi_b = as_float(b.get("top_head_pct_heldout_lo")), as_float(b.get("top_head_pct_heldout_hi"))
        ratios.append(mb / ma)
        # a conservative interval for the ratio: the extremes of the two intervals
        intervals.append((lo_b / hi_a if hi_a > 0 else math.nan, hi_b / lo_a if lo_a > 0 else math.inf,
                          _ci_notes({p.gqa: b, p.mha: a})))
        used += [p.mha, p.gqa]
        parts.append(f"{p.label}: {p.gqa} {mb:.0f}% / {p.mha} {ma:.0f}% = {mb / ma:.2f}x")
    if not ratios:
        return _untestable(cid, text, "no matched pair has a top head score on both sides")
    inside = all(RATIO_RANGE[0] <= r <= RATIO_RANGE[1] for r in ratios)
    decisive = all(hi < RATIO_RANGE[0] or lo > RATIO_RANGE[1] or (RATIO_RANGE[0] <= lo and hi <= RATIO_RANGE[1])
                   for lo, hi, _ in intervals)
    return Claim(cid, text, used, "; ".join(parts),
                 "; ".join(f"[{lo:.2f}, {hi:.2f}]{note}" for lo, hi, note in intervals), HOLDS if inside else FAILS,
                 ("ratio interval from the two 95% intervals' extremes" +
                  ("" if decisive else "; the interval reaches across 4-8x, so the verdict rests on the point estimate")
                  + f"; {rule}")).row()


def _by_family(run: Run, table, attention: str, value) -> dict:
    """family -> [(n_params, value, model)] smallest first, over the run's pretrained models of one
    attention type whose row gives a value (`value(model, row)`, None: none), for families of two
    or more sizes (a claim about scale within a family)."""
    fams = {}
    for m in run.pretrained(attention):
        r = _row(table, m)
        if r and (v := value(m, r)) is not None:
            fams.setdefault(run.cards[m].family, []).append((int(run.cards[m].n_params), v, m))
    return {f: sorted(v) for f, v in fams.items() if len(v) >= 2}


def top_layer_deepens(run: Run) -> dict:
    text = "The top head's layer deepens with scale in the MHA family (IOI)"
    cid = "ioi_mha_top_layer_deepens"
    if why := _missing(run, IOI_T1):
        return _untestable(cid, text, why)
    def depth(m, r):
        if not (r.get("top_head") and str(r["top_head"]).startswith("L")):
            return None
        layer = int(str(r["top_head"])[1:].split("H")[0].split("G")[0])
        return layer / max(1, int(run.cards[m].n_layers) - 1)

    fams = _by_family(run, run.table(IOI_T1), "mha", depth)
    if not fams:
        return _untestable(cid, text, "needs two or more pretrained MHA models of one family")
    parts, ok = [], True
    for fam, v in fams.items():
        depths = [d for _, d, _ in v]
        ok &= all(b >= a for a, b in zip(depths, depths[1:])) and depths[-1] > depths[0]
        parts.append(f"{fam}: " + " -> ".join(f"{m} {d:.2f}" for _, d, m in v))
    return Claim(cid, text, [m for v in fams.values() for _, _, m in v], "; ".join(parts), "",
                 HOLDS if ok else FAILS, "relative depth (layer / (layers - 1)) by parameter count; no interval: "
                                         "the top head's layer is one index per model").row()


def top_head_necessary(run: Run) -> dict:
    text = (f"Ablating the top head alone flips the IOI sign or removes at least {TOP_REMOVES}% of it in every "
            "pretrained GQA model of this run (the paper: flips in Qwen2.5 0.5B and 1.5B, removes 89.6% in 7B)")
    cid = "ioi_gqa_top_head_necessary"
    if (why := _missing(run, IOI_T1, IOI_T2)) or not (models := run.pretrained("gqa")):
        return _untestable(cid, text, why or "no pretrained GQA model in this run")
    parts, ivals, ok, used = [], [], True, []
    for m in models:
        r2, r1 = _row(run.table(IOI_T2), m), _row(run.table(IOI_T1), m)
        if not r2 or r2.get("damage_ok") in (False, "False") or math.isnan(as_float(r2.get("drop_pct"))):
            continue
        flip = r2.get("sign_flip") in (True, "True")
        drop = as_float(r2["drop_pct"])
        ok &= flip or drop >= TOP_REMOVES
        used.append(m)
        parts.append(f"{m}: {pct(drop)}{' (sign flips)' if flip else ''}")
        lo, hi = ((as_float(r1.get("top_head_pct_heldout_lo")), as_float(r1.get("top_head_pct_heldout_hi")))
                  if r1 else (0, 0))
        ivals.append(f"{m}: [{lo:.0f}, {hi:.0f}]{_ci_notes({m: r1})}" if r1 and not (math.isnan(lo) or math.isnan(hi))
                     else None)
    if not used:
        return _untestable(cid, text, "no GQA model's clean IOI logit difference lies above its floor")
    bare = [m for m, i in zip(used, ivals) if i is None]
    return Claim(cid, text, used, "; ".join(parts), "; ".join(i for i in ivals if i), HOLDS if ok else FAILS,
                 "drop on held-out prompts; interval: the top unit's 95% bootstrap interval (Table 1)"
                 + (f"; none for {', '.join(bare)} (run without a bootstrap)" if bare else "")).row()


def facts_bottleneck(run: Run) -> dict:
    text = "Facts circuits collapse to one bottleneck past a critical scale within a GQA family"
    cid = "facts_gqa_bottleneck"
    if why := _missing(run, FACTS_T1):
        return _untestable(cid, text, why)
    fams = _by_family(run, run.table(FACTS_T1), "gqa", lambda m, r: _heads_to(r, run.threshold))
    if not fams:
        return _untestable(cid, text, "needs two or more sizes of one pretrained GQA family")
    parts, ok = [], True
    for fam, v in fams.items():
        ok &= v[-1][1] == (1.0, False) and v[0][1] != (1.0, False)
        parts.append(f"{fam}: " + " -> ".join(f"{m} {_label(*h)}" for _, h, m in v))
    return Claim(cid, text, [m for v in fams.values() for _, _, m in v], "; ".join(parts), "",
                 HOLDS if ok else FAILS, f"greedy heads-to-{_pct(run)} of the facts metric from the smallest to the "
                                         "largest; " + _no_interval(run)).row()


CLAIMS = (gqa_one_unit, top_head_ratio, mha_two_to_five, top_layer_deepens, top_head_necessary,
          random_heads_harmless, same_head_easy_hard, facts_bottleneck)


# What would let a run decide each claim (or decide it more firmly): the claims table's testable_when
TESTABLE = {
    "ioi_gqa_one_unit": "pretrained GQA models (config models:) scored on IOI under zero query ablation, clean "
                        "logit difference above its floor; an interval on heads-to would need the greedy curve "
                        "bootstrapped",
    "ioi_gqa_top_head_ratio": "a pretrained MHA and GQA model within 2x parameters; toys only across the sweep's "
                              "seeds (one toy pair is one seed)",
    "ioi_mha_two_to_five": "pretrained MHA models (e.g. Pythia) scored on IOI under zero query ablation",
    "ioi_mha_top_layer_deepens": "two or more sizes of one pretrained MHA family",
    "ioi_gqa_top_head_necessary": "pretrained GQA models with IOI's Table 2, run with a bootstrap for the interval",
    "facts_gqa_bottleneck": "two or more sizes of one pretrained GQA family scored on facts",
}


def claims(run: Run) -> pl.DataFrame:
    """One row per claim, with what would make it testable (`TESTABLE`, or the claim's own)."""
    rows = [c(run) for c in CLAIMS]
    return pl.DataFrame([{**r, "testable_when": r.get("testable_when") or TESTABLE.get(r["claim_id"], "")}
                         for r in rows])
