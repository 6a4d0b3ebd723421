"""Sufficiency, MIB's measures: the fractions-to-units rule, faithfulness in both metric
orientations, CPR and CMD against hand computations, a planted model whose task sits in k known
heads, and the measures in Table 1, the robustness table and the sweep's paired table."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from helpers import model_card

from circuitloc import sufficiency

# -- the formula ---------------------------------------------------------------------------

X = sufficiency.FRACTIONS


def test_fractions_are_mibs_and_counts_are_truncated():
    assert X == (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)
    assert [sufficiency.kept_units(f, 16) for f in X] == [0, 0, 0, 0, 0, 0, 1, 3, 8, 16]
    assert [sufficiency.kept_units(f, 144) for f in X] == [0, 0, 0, 1, 2, 7, 14, 28, 72, 144]
    assert [sufficiency.kept_units(f, 1000) for f in X] == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert sufficiency.kept_units(0.5, 5) == 2 and sufficiency.kept_units(0.2, 8) == 1  # truncated, never rounded up
    assert sufficiency.kept_units(1, 7) == 7  # the last fraction keeps every unit: the full model


def test_faithfulness_is_one_for_the_model_and_zero_for_the_empty_circuit_in_both_orientations():
    # logit difference (higher is better): model 4, empty 0
    assert sufficiency.faithfulness(4.0, 4.0, 0.0) == 1 and sufficiency.faithfulness(0.0, 4.0, 0.0) == 0
    assert sufficiency.faithfulness(1.0, 4.0, 0.0) == pytest.approx(0.25)
    # a loss (lower is better): model 1.0, empty 3.0
    assert sufficiency.faithfulness(1.0, 1.0, 3.0) == 1 and sufficiency.faithfulness(3.0, 1.0, 3.0) == 0
    assert sufficiency.faithfulness(2.5, 1.0, 3.0) == pytest.approx(0.25)
    assert np.allclose(sufficiency.faithfulness([1.0, 2.0, 3.0], 1.0, 3.0), [1, 0.5, 0])
    assert np.isnan(sufficiency.faithfulness(2.0, 3.0, 3.0))  # no span: nothing to keep


def _mib_loop(f):
    """The sums of MIB's evaluate_area_under_curve, written out as its loop does (linear x)."""
    under = from_1 = 0.0
    for i in range(len(f) - 1):
        dx = X[i + 1] - X[i]
        from_1 += dx * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2
        under += dx * (f[i] + f[i + 1]) / 2
    return under, from_1


@pytest.mark.parametrize("f, cpr, cmd", [
    ([1.0] * 10, 0.999, 0.0),  # no point at 0: the x range is 1 - 0.001
    ([0.0] * 10, 0.0, 0.999),
    # nothing until 20% of the units, then everything: 0.1 * 1/2 + 0.3 + 0.5 and 0.099 + 0.1 * 1/2
    ([0.0] * 7 + [1.0] * 3, 0.85, 0.149),
    # linear in the fraction: the area of x from 0.001 to 1, and of 1 - x
    (list(X), (1 - 0.001 ** 2) / 2, 0.999 - (1 - 0.001 ** 2) / 2),
    # overshoot and a negative f: CMD counts both as distance from 1
    ([0, 0, 0, 0, 0, 0, 0.5, 1.5, 1, 1],
     0.05 * 0.25 + 0.1 * 1.0 + 0.3 * 1.25 + 0.5 * 1.0,
     0.049 + 0.05 * 0.75 + 0.1 * 0.5 + 0.3 * 0.25),
    ([0, 0, 0, 0, 0, 0, -0.4, 0, 1, 1],
     0.05 * -0.2 + 0.1 * -0.2 + 0.3 * 0.5 + 0.5,
     0.049 + 0.05 * 1.2 + 0.1 * 1.2 + 0.3 * 0.5),
])
def test_cpr_and_cmd_match_a_hand_computation_and_mibs_loop(f, cpr, cmd):
    got = sufficiency.cpr_cmd(f)
    assert got == pytest.approx((cpr, cmd), abs=1e-12)
    assert got == pytest.approx(_mib_loop(f), abs=1e-12)


def test_cpr_and_cmd_refuse_a_missing_point():
    assert all(np.isnan(sufficiency.cpr_cmd([1.0] * 9 + [np.nan])))
    with pytest.raises(ValueError):
        sufficiency.cpr_cmd([1.0] * 9)


# -- a planted sufficient circuit ----------------------------------------------------------------

def _planted(n_kv, writers):
    from test_planted import D, H, writer_model

    from circuitloc.engine.ablation import Probe, score_units, units
    from circuitloc.engine.scan import Scanner
    from circuitloc.metrics import rank
    from circuitloc.prompts import Prompts
    from circuitloc.tasks.registry import TASKS

    m = writer_model(n_kv, 10.0, writers)
    card = model_card(n_layers=2, n_heads=H, n_kv_heads=n_kv, d_head=D // H)
    n = 4
    p = Prompts(torch.randint(3, 8, (n, 5)), torch.full((n,), 4), {"io_id": torch.full((n,), 1),
                                                                  "s_id": torch.full((n,), 2)})
    probe = Probe(Scanner(m, H, D // H), p, TASKS["ioi"])
    scores, _ = score_units(probe, units(card), floor=0.0)
    by_label = {u.label: u for u in units(card)}
    return probe, [by_label[u] for u in rank(scores)["unit"]], m.config.rms_norm_eps


@pytest.mark.parametrize("n_kv", [4, 2])
def test_a_planted_circuit_of_k_heads_is_sufficient_and_its_cpr_is_known(n_kv):
    """Two of the 8 heads write the answer (2u each), nothing else writes. Kept alone they are the
    whole task (f = 1), none kept is none of it (f = 0); MIB's fractions of 8 units keep 0 (seven
    times), 1, 4 and 8 units, so f = [0]*7 + [r, 1, 1] with r = LD(2u) / LD(4u) by hand, and
    CPR = 0.1 * r / 2 + 0.3 * (r + 1) / 2 + 0.5."""
    from test_planted import ld_by_hand

    from circuitloc.engine.ablation import as_sets
    from circuitloc.engine.sufficiency import sufficiency_curve

    planted = [(1, 2), (0, 3)]
    probe, ranked, eps = _planted(n_kv, [(layer, head, 2.0) for layer, head in planted])
    assert {(u.layer, u.head) for u in ranked[:2]} == set(planted)  # the ranking finds them
    clean, empty = probe.means([{}, as_sets(ranked)])
    kept_k = probe.means([as_sets(ranked[2:])])[0]  # every unit but the planted two ablated
    assert sufficiency.faithfulness(kept_k, clean, empty) == pytest.approx(1.0, abs=1e-5)
    assert sufficiency.faithfulness(empty, clean, empty) == 0

    rows = pl.DataFrame(sufficiency_curve(probe, ranked))
    assert rows["kept"].to_list() == [0] * 7 + [1, 4, 8]
    r = ld_by_hand(2.0, eps) / ld_by_hand(4.0, eps)
    assert 0.5 < r < 0.99  # the final norm makes one writer worth more than half
    assert rows["faithfulness"].to_list() == pytest.approx([0] * 7 + [r, 1, 1], abs=1e-5)
    cpr, cmd = sufficiency.cpr_cmd(rows["faithfulness"].to_numpy(), rows["fraction"].to_numpy())
    assert cpr == pytest.approx(0.1 * r / 2 + 0.3 * (r + 1) / 2 + 0.5, abs=1e-5)
    assert cmd == pytest.approx(0.099 + 0.1 * (1 + (1 - r)) / 2 + 0.3 * (1 - r) / 2, abs=1e-5)
    assert rows["unit"][7] == ranked[0].label and rows["unit"][:7].is_null().all()


def test_a_spread_circuit_scores_a_lower_cpr_than_a_concentrated_one():
    """Every head writing the same share of the answer: keeping 1 of 8 recovers far less than when
    one head carries it all, so CPR falls and CMD rises."""
    from circuitloc.engine.sufficiency import sufficiency_curve

    one_probe, one_ranked, _ = _planted(4, [(1, 2, 4.0)])
    one_rows = sufficiency_curve(one_probe, one_ranked)
    spread_probe, spread_ranked, _ = _planted(4, [(layer, h, 0.5) for layer in (0, 1) for h in range(4)])
    spread_rows = sufficiency_curve(spread_probe, spread_ranked)
    a = sufficiency.cpr_cmd([r["faithfulness"] for r in one_rows])
    b = sufficiency.cpr_cmd([r["faithfulness"] for r in spread_rows])
    assert a[0] == pytest.approx(0.85, abs=1e-5) and b[0] < a[0] - 0.02 and b[1] > a[1] + 0.02


# -- the tables ----------------------------------------------------------------------------------

def test_table1_carries_cpr_and_cmd_of_the_sufficiency_rows():
    from test_planted import _as_jobs_write

    from circuitloc.report.tables.localization import table1

    f = [0.0] * 7 + [1.0] * 3
    scores = pl.DataFrame({"layer": [0, 0], "head": [0, 1], "unit": ["L0H0", "L0H1"], "drop": [2.0, 0.5],
                           "damage": [0.5, 0.1], "ld_clean": [4.0, 4.0]})
    ranked = pl.DataFrame({"step": [1, 2], "unit": ["L0H0", "L0H1"], "layer": [0, 0], "head": [0, 1],
                           "ld": [2.0, 0.0], "damage": [0.5, 1.0]})
    s, c = _as_jobs_write(scores, ranked, 4.0, 6)
    suff = pl.DataFrame({"method": sufficiency.METHOD, "step": list(range(1, 11)), "fraction": list(X), "faithfulness": f,
                         "kept": [0] * 7 + [1, 1, 2]})
    c = {"planted": pl.concat([c["planted"], suff], how="diagonal_relaxed")}
    card = {"planted": model_card(family="p", attention="mha", n_params=1)}
    t1 = table1("ioi", card, s, c, 0.8)
    assert t1["cpr"][0] == pytest.approx(0.85) and t1["cmd"][0] == pytest.approx(0.149)
    assert t1["curve_area"][0] == pytest.approx(0.5)  # the necessity area beside it, unchanged
    old = {"planted": c["planted"].filter(pl.col("method") != sufficiency.METHOD).drop("faithfulness", "fraction", "kept")}
    bare = table1("ioi", card, s, old, 0.8)  # a curve table without sufficiency rows: NaN, not a guess
    assert np.isnan(bare["cpr"][0]) and np.isnan(bare["cmd"][0]) and bare["curve_area"][0] == pytest.approx(0.5)


def test_sweep_pairs_cpr_and_cmd_only_at_equal_unit_counts():
    from scipy import stats
    from test_sweep import _rows

    from circuitloc.report.sweep.paired import paired
    from circuitloc.report.sweep.summary import per_model

    spec = {(kv, s): (40.0 + s, "3", 5.0) for kv in (8, 1) for s in range(6)}
    t1, meta = _rows(spec)
    mha = 0.6 + 0.02 * np.arange(6)
    one = mha + 0.1 + 0.03 * np.array([0, 2, 1, 3, 1, 2])
    cpr = [(mha if meta[m]["kv_heads"] == 8 else one)[meta[m]["seed"]] for m in t1["model"]]
    t1 = t1.with_columns(cpr=pl.Series(cpr), cmd=0.999 - pl.Series(cpr))
    r = paired(per_model(t1, meta, {}, "ioi")).row(0, named=True)
    assert r["comparison"] == "tested"
    assert r["cpr_diff"] == pytest.approx(np.mean(one - mha))
    assert r["cpr_p"] == pytest.approx(stats.ttest_rel(one, mha).pvalue)
    assert r["direction_cpr"] == 1 and r["direction_cmd"] == 1  # higher CPR, lower CMD: more sufficient
    assert r["cpr_family"] == "exploratory" and np.isfinite(r["cpr_p_holm"])
    counts = pl.Series([16 if meta[m]["kv_heads"] == 8 else 2 for m in t1["model"]])
    d = paired(per_model(t1.with_columns(n_units=counts), meta, {}, "ioi")).row(0, named=True)
    assert d["comparison"].startswith("descriptive") and np.isnan(d["cpr_p"]) and np.isnan(d["cmd_p"])
    assert d["cpr_diff"] == pytest.approx(np.mean(one - mha))  # described, not tested


def test_robustness_sides_carry_cpr_and_cmd():
    from circuitloc.report.tables.analysis import compare

    base = {"heads_to_80": [2], "heads_to_80_bounded": [False], "n_units": [16], "top_head_pct": [30.0],
            "curve_prompts": ["all"], "curve_area": [0.6], "effective_units": [3.0]}
    mha = pl.DataFrame({"model": ["a"], **base, "cpr": [0.8], "cmd": [0.2]})
    gqa = pl.DataFrame({"model": ["b"], **base, "cpr": [0.9], "cmd": [0.1]})
    out = compare(mha, gqa)
    assert (out["mha_cpr"], out["gqa_cpr"], out["mha_cmd"], out["gqa_cmd"]) == pytest.approx((0.8, 0.9, 0.2, 0.1))
    assert "cpr" not in out["verdict"]  # described beside the verdict, not part of it


# -- MIB's node-importance form ------------------------------------------------------------------

def test_node_importances_are_keyed_as_mib_names_nodes(tmp_path):
    from circuitloc.report.records import TableJob
    from circuitloc.report.tables.mib import node_importances, write_importances

    card = model_card(name="toy", n_layers=2, n_heads=4, n_kv_heads=2, d_model=16, architecture="Qwen2ForCausalLM")
    scores = pl.DataFrame({"unit": ["L0G0", "L0G1", "L1G0", "L1G1"], "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                           "heads": [[0, 1], [2, 3], [0, 1], [2, 3]], "drop": [0.1, 2.0, -0.3, 0.5],
                           "metric": ["ld"] * 4})
    doc = node_importances(card, scores, TableJob("ioi", "zero-kv"))
    assert doc["cfg"] == {"n_layers": 2, "n_heads": 4, "parallel_attn_mlp": False, "d_model": 16}
    assert list(doc["nodes"])[:6] == ["input", "a0.h0", "a0.h1", "a0.h2", "a0.h3", "m0"]
    assert list(doc["nodes"])[-1] == "logits" and doc["edges"] == {}
    assert doc["nodes"]["a0.h2"]["score"] == doc["nodes"]["a0.h3"]["score"] == 2.0  # a group's heads share it
    assert doc["nodes"]["a1.h0"]["score"] == -0.3
    assert "score" not in doc["nodes"]["m0"] and "score" not in doc["nodes"]["input"]  # kept, as MIB keeps them
    assert all(v["in_graph"] for v in doc["nodes"].values())
    assert doc["circuitloc"]["units"]["L0G1"] == ["a0.h2", "a0.h3"]
    scores_path, card_path = tmp_path / "s.parquet", tmp_path / "card.json"
    scores.write_parquet(scores_path)
    card.write(card_path)
    out = tmp_path / "mib" / "ioi" / "zero-kv"
    write_importances(TableJob("ioi", "zero-kv"), {"toy": card_path}, {"toy": scores_path}, out)
    back = json.loads((out / "ioi_toy" / "importances.json").read_text())
    assert {"cfg", "nodes", "edges"} <= set(back) and back["nodes"]["a0.h2"]["score"] == 2.0


def test_mib_order_keeps_a_nan_drop_last():
    """|drop| largest first; a unit without a score (NaN drop) is ranked after every scored one,
    never kept first (it was: NaN mapped to -inf, then made +inf by the absolute value)."""
    from circuitloc.sufficiency import mib_order

    assert mib_order(["a", "b", "c", "d"], [.5, .2, float("nan"), -.3]) == ["a", "d", "b", "c"]
    assert mib_order(["a", "b", "c"], [float("nan"), -1.0, 0.0]) == ["b", "c", "a"]
