"""The claims table decides each claim from the tables: planted tables where a claim holds and
where it does not, and a run that cannot test it."""

import polars as pl
import pytest

from helpers import model_card

from circuitloc.report.claims import judge as claims
from circuitloc.report.claims import pairing as claims_pairing


def card(name, attention, family, n_params=10**8, source="gguf", n_layers=12):
    return model_card(name=name, attention=attention, family=family, n_params=n_params, source=source,
                      n_layers=n_layers)


def t1(rows):
    base = {"top_head": "L3H1", "top_head_pct_heldout": 50.0, "top_head_pct_heldout_lo": 40.0,
            "top_head_pct_heldout_hi": 60.0, "heads_to_80_greedy": 1.0, "heads_to_80_greedy_bounded": False,
            "damage_ok": True}
    return pl.DataFrame([{**base, **r} for r in rows])


def verdict(fn, tables, cards):
    return fn(claims.Run(tables, cards, 0.8))["verdict"]


GQA2 = {"q05": card("q05", "gqa", "qwen", 5 * 10**8), "q15": card("q15", "gqa", "qwen", 15 * 10**8)}


@pytest.mark.parametrize("counts, bounded, expect", [([1, 1], [False, False], claims.HOLDS),
                                                     ([1, 3], [False, False], claims.FAILS),
                                                     ([1, 1], [False, True], claims.FAILS)])
def test_one_unit_claim(counts, bounded, expect):
    table = t1([{"model": m, "heads_to_80_greedy": float(c), "heads_to_80_greedy_bounded": b}
                for m, c, b in zip(GQA2, counts, bounded)])
    assert verdict(claims.gqa_one_unit, {claims.IOI_T1: table}, GQA2) == expect


def test_claims_on_toys_only_are_not_testable_and_say_why():
    toys = {"t": card("t", "gqa", "toy", source="toy")}
    row = claims.gqa_one_unit(claims.Run({claims.IOI_T1: t1([{"model": "t"}])}, toys, 0.8))
    assert row["verdict"] == claims.UNTESTABLE and "no pretrained GQA model" in row["reason"]
    row = claims.gqa_one_unit(claims.Run({}, GQA2, 0.8))
    assert row["verdict"] == claims.UNTESTABLE and claims.IOI_T1 in row["reason"]


def test_a_model_below_its_floor_is_left_out():
    table = t1([{"model": "q05", "damage_ok": False, "heads_to_80_greedy": 7.0}, {"model": "q15"}])
    row = claims.gqa_one_unit(claims.Run({claims.IOI_T1: table}, GQA2, 0.8))
    assert row["verdict"] == claims.HOLDS and row["models"] == "q15"


@pytest.mark.parametrize("gqa_pct, expect", [(60.0, claims.HOLDS), (20.0, claims.FAILS), (90.0, claims.FAILS)])
def test_ratio_claim_on_a_matched_pair(gqa_pct, expect):
    cards = {"m": card("m", "mha", "pythia"), "g": card("g", "gqa", "qwen")}
    table = t1([{"model": "m", "top_head_pct_heldout": 10.0, "top_head_pct_heldout_lo": 8.0,
                 "top_head_pct_heldout_hi": 12.0},
                {"model": "g", "top_head_pct_heldout": gqa_pct, "top_head_pct_heldout_lo": gqa_pct - 5,
                 "top_head_pct_heldout_hi": gqa_pct + 5}])
    row = claims.top_head_ratio(claims.Run({claims.IOI_T1: table}, cards, 0.8))
    assert row["verdict"] == expect
    assert f"{gqa_pct / 10:.2f}x" in row["measured"]
    lo, hi = (gqa_pct - 5) / 12, (gqa_pct + 5) / 8
    assert row["interval"] == f"[{lo:.2f}, {hi:.2f}]"


@pytest.mark.parametrize("layers, expect", [(["L1H0", "L5H2", "L9H0"], claims.HOLDS), (["L5H0", "L2H2", "L9H0"], claims.FAILS)])
def test_layer_deepens(layers, expect):
    cards = {f"p{i}": card(f"p{i}", "mha", "pythia", n_params=10**8 * (i + 1), n_layers=12) for i in range(3)}
    table = t1([{"model": m, "top_head": h} for m, h in zip(cards, layers)])
    assert verdict(claims.top_layer_deepens, {claims.IOI_T1: table}, cards) == expect


@pytest.mark.parametrize("drops, flips, expect", [([95.0, 120.0], [False, True], claims.HOLDS),
                                                  ([60.0, 120.0], [False, True], claims.FAILS)])
def test_top_head_necessary(drops, flips, expect):
    t2 = pl.DataFrame([{"model": m, "drop_pct": d, "sign_flip": f, "damage_ok": True}
                       for m, d, f in zip(GQA2, drops, flips)])
    assert verdict(claims.top_head_necessary, {claims.IOI_T1: t1([{"model": m} for m in GQA2]), claims.IOI_T2: t2}, GQA2) == expect


@pytest.mark.parametrize("adj_lo, adj_hi, expect", [([0.5, 1.0], [3.0, 4.5], claims.HOLDS),
                                                    ([0.5, 5.0], [3.0, 9.0], claims.FAILS),
                                                    ([0.5, 3.0], [3.0, 6.0], claims.INCONCLUSIVE),
                                                    ([0.5, float("nan")], [3.0, float("nan")], claims.INCONCLUSIVE)])
def test_random_heads(adj_lo, adj_hi, expect):
    """Symmetric: a draw's Bonferroni lower bound at 5% fails it, every upper bound below 5% holds
    it, anything else (or no interval) is inconclusive; the largest draw's point estimate (7.0 in
    every row here) decides nothing."""
    t2 = pl.DataFrame([{"model": m, "control_drop_pct_mean": 2.0, "control_drop_pct_max": 7.0 if lo < 5 else 8.0,
                        "control_max_drop_pct_lo": 1.0, "control_max_drop_pct_hi": 9.0, "control_draws": 10,
                        "control_adj_level_pct": 99.5, "control_adj_drop_pct_lo": lo, "control_adj_drop_pct_hi": hi}
                       for m, lo, hi in zip(GQA2, adj_lo, adj_hi)])
    row = claims.random_heads_harmless(claims.Run({claims.IOI_T2: t2}, GQA2, 0.8))
    assert row["verdict"] == expect, row
    if expect == claims.INCONCLUSIVE:
        assert "reaches across 5%" in row["reason"] or "no interval" in row["reason"]


def _control_runs(true_pcts, runs=200, n=60, seed=0):
    """Table 2's control columns of `runs` simulated models whose draws have the given true damages
    (% of clean; floor 0), each measured on n prompts with a standard error near 1%: the draws'
    intervals from stats.drop_intervals, the columns from tables._control_max_interval."""
    import numpy as np

    from circuitloc import stats
    from circuitloc.report.tables.localization import _control_max_interval

    rng = np.random.default_rng(seed)
    out = []
    for i in range(runs):
        clean = 4 + 0.5 * rng.normal(size=n)
        ablated = clean[None, :] * (1 - np.asarray(true_pcts)[:, None] / 100) + 0.31 * rng.normal(size=(len(true_pcts), n))
        iv = stats.drop_intervals(clean, ablated, True, stats.Bootstrap(1000, i), floor=0.0)
        pct = 100 * (clean.mean() - ablated.mean(axis=1)) / clean.mean()
        ctrl = pl.DataFrame({"damage_lo": iv["damage_lo"], "damage_hi": iv["damage_hi"]})
        out.append({"model": "q05", "control_drop_pct_max": float(pct.max()), "control_drop_pct_mean": float(pct.mean()),
                    "control_draws": len(true_pcts), **_control_max_interval(ctrl, pct, True, n)})
    return out


@pytest.mark.slow  # a simulation (pyproject's slow marker)
def test_the_control_claim_is_not_fooled_by_the_largest_of_ten_harmless_draws():
    """Ten draws truly at 3%: the largest draw's point estimate reaches 5% in a fair share of runs
    (selection), yet the claim says "does not hold" in at most 5% of them; add one draw truly at
    20% and it says "does not hold" in every run."""
    one = {"q05": GQA2["q05"]}
    harmless = _control_runs([3.0] * 10)
    verdicts = [claims.random_heads_harmless(claims.Run({claims.IOI_T2: pl.DataFrame([r])}, one, 0.8))["verdict"]
                for r in harmless]
    old_rule = sum(r["control_drop_pct_max"] >= 5 for r in harmless) / len(harmless)
    assert old_rule >= 0.1, old_rule  # the point rule's false alarms, which the claim must not repeat
    assert verdicts.count(claims.FAILS) / len(verdicts) <= 0.05, verdicts.count(claims.FAILS)
    assert harmless[0]["control_adj_level_pct"] == pytest.approx(99.5)
    harmful = _control_runs([3.0] * 10 + [20.0], runs=50, seed=1)
    verdicts = [claims.random_heads_harmless(claims.Run({claims.IOI_T2: pl.DataFrame([r])}, one, 0.8))["verdict"]
                for r in harmful]
    assert verdicts == [claims.FAILS] * 50


@pytest.mark.slow  # a simulation (pyproject's slow marker)
def test_the_control_claim_holds_when_every_draw_is_clearly_below_the_cut():
    one = {"q05": GQA2["q05"]}
    quiet = _control_runs([0.5] * 10, runs=20, n=180, seed=2)
    verdicts = {claims.random_heads_harmless(claims.Run({claims.IOI_T2: pl.DataFrame([r])}, one, 0.8))["verdict"]
                for r in quiet}
    assert verdicts == {claims.HOLDS}


def stab(model, same, n=30, freq=0.9):
    return {"model": model, "split": "clean LD", "ablation": "zero-query", "same_top": same, "top_a": "L0H1",
            "top_b": "L0H1" if same else "L0H2", "n_a": n, "n_b": n, "a_top_freq": freq, "b_top_freq": freq}


@pytest.mark.parametrize("same_mha, same_gqa, expect", [(False, True, claims.HOLDS), (True, True, claims.FAILS)])
def test_same_head(same_mha, same_gqa, expect):
    cards = {"m": card("m", "mha", "pythia"), "g": card("g", "gqa", "qwen")}
    st = pl.DataFrame([stab(m, s) for m, s in (("m", same_mha), ("g", same_gqa))])
    assert verdict(claims.same_head_easy_hard, {claims.IOI_STAB: st}, cards) == expect


@pytest.mark.parametrize("counts, expect", [([3, 1], claims.HOLDS), ([1, 1], claims.FAILS), ([3, 2], claims.FAILS)])
def test_facts_bottleneck(counts, expect):
    table = t1([{"model": m, "heads_to_80_greedy": float(c)} for m, c in zip(GQA2, counts)])
    assert verdict(claims.facts_bottleneck, {claims.FACTS_T1: table}, GQA2) == expect


def test_one_row_per_claim_and_the_paper_form():
    df = claims.claims(claims.Run({}, GQA2, 0.8))
    assert df.height == len(claims.CLAIMS) and df["claim_id"].n_unique() == df.height
    assert set(df["verdict"]) == {claims.UNTESTABLE}
    assert claims.pct(56.2, 44.4, 77.0) == "56% [44, 77]" and claims.pct(float("nan")) == ""
    assert claims.pct(-0.4) == "0%" and claims.pct(-0.4, -2.6, 1.9) == "0% [-3, 2]"  # never '-0%'
    assert claims.pct(-0.6) == "-1%"


# the six models of config/paper.yaml: Pythia (MHA) and Qwen2.5 (GQA) are two families, so the
# MHA-versus-GQA claims pair them by parameter count (the cards' n_params, Table 1's params)
PAPER = {**{m: card(m, "mha", "pythia", n, source="hf")
            for m, n in (("pythia_160m", 162 * 10**6), ("pythia_1.4b", 1414 * 10**6), ("pythia_6.9b", 6857 * 10**6))},
         **{m: card(m, "gqa", "qwen2.5", n, source="hf")
            for m, n in (("qwen2.5_0.5b", 494 * 10**6), ("qwen2.5_1.5b", 1544 * 10**6), ("qwen2.5_7b", 7616 * 10**6))}}


def test_pretrained_models_pair_across_families_by_scale_within_twice():
    pairs, notes = claims_pairing.scale_pairs(PAPER)
    assert [(p.mha, p.gqa) for p in pairs] == [("pythia_1.4b", "qwen2.5_1.5b"), ("pythia_6.9b", "qwen2.5_7b")]
    # Pythia-160M's nearest GQA model is 3x its size: not matched scale, and the reason says so
    assert len(notes) == 1 and "pythia_160m" in notes[0] and "qwen2.5_0.5b" in notes[0] and "3.05x" in notes[0]


def test_toys_pair_only_within_their_family():
    cards = {**PAPER, "toy_mha": card("toy_mha", "mha", "toy", 10**8, source="toy"),
             "toy_gqa": card("toy_gqa", "gqa", "toy", 10**8, source="toy"),
             "other_gqa": card("other_gqa", "gqa", "other_toy", 10**8, source="toy")}
    pairs, rule = claims.Run({}, cards, 0.8).matched_pairs()
    assert [(p.mha, p.gqa) for p in pairs] == [("toy_mha", "toy_gqa"), ("pythia_1.4b", "qwen2.5_1.5b"),
                                               ("pythia_6.9b", "qwen2.5_7b")]
    assert f"within {claims_pairing.MATCH_FACTOR:g}x" in rule and "pythia_160m unmatched" in rule


@pytest.mark.parametrize("gqa_pct, expect", [(60.0, claims.HOLDS), (15.0, claims.FAILS)])
def test_ratio_claim_on_the_papers_six_models(gqa_pct, expect):
    mha = {"pythia_160m": 30.0, "pythia_1.4b": 10.0, "pythia_6.9b": 12.0}
    rows = [{"model": m, "top_head_pct_heldout": v} for m, v in mha.items()]
    rows += [{"model": m, "top_head_pct_heldout": gqa_pct} for m in PAPER if m.startswith("qwen")]
    row = claims.top_head_ratio(claims.Run({claims.IOI_T1: t1(rows)}, PAPER, 0.8))
    assert row["verdict"] == expect
    assert row["models"] == "pythia_1.4b, qwen2.5_1.5b, pythia_6.9b, qwen2.5_7b"
    assert f"{gqa_pct / 10:.2f}x" in row["measured"] and f"{gqa_pct / 12:.2f}x" in row["measured"]
    assert row["interval"].count("[") == 2 and "within 2x" in row["reason"] and "pythia_160m" in row["reason"]


@pytest.mark.parametrize("same_mha, same_gqa, expect", [(False, True, claims.HOLDS), (True, True, claims.FAILS),
                                                        (False, False, claims.FAILS)])
def test_same_head_claim_on_the_papers_six_models(same_mha, same_gqa, expect):
    st = pl.DataFrame([stab(m, same_gqa if c.attention == "gqa" else same_mha) for m, c in PAPER.items()])
    row = claims.same_head_easy_hard(claims.Run({claims.IOI_STAB: st}, PAPER, 0.8))
    assert row["verdict"] == expect and "pythia_160m" not in row["models"].split(", ")


def test_one_unit_claim_names_the_models_it_judges():
    table = t1([{"model": m, "heads_to_80_greedy": 1.0} for m in PAPER if m != "qwen2.5_7b"])
    row = claims.gqa_one_unit(claims.Run({claims.IOI_T1: table}, PAPER, 0.8))
    assert row["verdict"] == claims.HOLDS and row["models"] == "qwen2.5_0.5b, qwen2.5_1.5b"
    assert "every pretrained GQA model of this run" in row["claim"] and "Qwen2.5" in row["claim"]
    assert "left out" in row["reason"] and "qwen2.5_7b" in row["reason"]
    assert row["interval"] == "" and "no interval" in row["reason"]


def test_top_head_necessary_interval_where_the_table_holds_one():
    t2 = pl.DataFrame([{"model": m, "drop_pct": 95.0, "sign_flip": False, "damage_ok": True} for m in GQA2])
    table = t1([{"model": "q05"}, {"model": "q15", "top_head_pct_heldout_lo": None, "top_head_pct_heldout_hi": None}])
    row = claims.top_head_necessary(claims.Run({claims.IOI_T1: table, claims.IOI_T2: t2}, GQA2, 0.8))
    assert row["interval"] == "q05: [40, 60]" and "none for q15" in row["reason"]


def test_claims_read_heads_to_at_the_runs_threshold():
    """At threshold 0.9 the tables have heads_to_90_* columns (metrics.heads_to_name): the claims read
    those and say 90%; read at 0.8, the same tables have no heads-to column and the claim is not testable."""
    table = pl.DataFrame([{"model": m, "heads_to_90_greedy": 1.0, "heads_to_90_greedy_bounded": False, "damage_ok": True}
                          for m in GQA2])
    row = claims.gqa_one_unit(claims.Run({claims.IOI_T1: table}, GQA2, 0.9))
    assert row["verdict"] == claims.HOLDS and row["measured"] == "q05: 1; q15: 1"
    assert "90% IOI damage" in row["claim"] and "heads-to-90%" in row["reason"]
    assert claims.gqa_one_unit(claims.Run({claims.IOI_T1: table}, GQA2, 0.8))["verdict"] == claims.UNTESTABLE
    bounded = table.with_columns(heads_to_90_greedy_bounded=pl.lit(True))
    assert claims.gqa_one_unit(claims.Run({claims.IOI_T1: bounded}, GQA2, 0.9))["verdict"] == claims.FAILS
