"""Stability splits, the specificity verdict and the robustness comparison on hand-made inputs."""

import numpy as np
import polars as pl
import pytest

from helpers import model_card

from circuitloc.metrics import specificity_verdict
from circuitloc.report.tables.analysis import compare, robustness, stability_rows, unit_drops


def _by_key(df: pl.DataFrame) -> dict:
    """Robustness rows by (task, kind, unit)."""
    return {(r["task"], r["kind"], r["unit"]): r for r in df.iter_rows(named=True)}


def _t1(model, family, attention, top_pct, h80, n_units=16, eff=3.0):
    bounded = str(h80).startswith(">")  # '> K': Table 1 stores K, bounded
    count = int(str(h80).lstrip("> "))
    return {"model": model, "family": family, "attention": attention, "top_head_pct": top_pct,
            "heads_to_80": count, "heads_to_80_bounded": bounded, "heads_to_80_frac": np.nan if bounded else count / n_units,
            "n_units": n_units, "effective_units": eff, "curve_area": 0.5, "cpr": 0.5, "cmd": 0.5, "task_behaviour": True, "damage_ok": True}


@pytest.mark.parametrize("mha, gqa, verdict", [
    ((30, 5), (60, 2), "yes"),        # GQA: higher top head and fewer units
    ((60, 2), (30, 5), "no"),
    ((30, 2), (60, 5), "mixed"),      # the two signals disagree
    ((30, "> 8"), (60, 3), "yes"),    # MHA never reaches 80% in 8 steps: it needs more than GQA's 3
    ((30, 3), (60, "> 8"), "mixed"),  # GQA's '> 8' could be anything above 8: undecided
    ((30, "> 8"), (60, "> 8"), "mixed"),
])
def test_compare_verdict(mha, gqa, verdict):
    out = compare(pl.DataFrame([_t1("m", "f", "mha", *mha)]), pl.DataFrame([_t1("g", "f", "gqa", *gqa)]))
    assert out["verdict"].startswith(f"GQA more concentrated: {verdict} ")
    assert out["mha_top_head_pct"] == mha[0] and out["gqa_top_head_pct"] == gqa[0]


def test_compare_reads_the_greedy_heads_to_where_the_curves_have_it():
    """Ranked and greedy curves disagree (MHA needs fewer heads on the ranked curve, GQA on the greedy
    one): the verdict follows greedy, the paper's measure and the sweep's, and reports its columns."""
    def greedy(row, count):
        return {**row, "heads_to_80_greedy": count, "heads_to_80_greedy_bounded": False,
                "heads_to_80_greedy_frac": count / row["n_units"]}
    mha, gqa = greedy(_t1("m", "f", "mha", 30, 2), 6), greedy(_t1("g", "f", "gqa", 60, 5), 1)
    out = compare(pl.DataFrame([mha]), pl.DataFrame([gqa]))
    assert out["verdict"].startswith("GQA more concentrated: yes ")
    assert "heads-to-80% (greedy) GQA fewer" in out["verdict"] and out["gqa_heads_to_80_greedy"] == 1
    ranked_only = compare(pl.DataFrame([_t1("m", "f", "mha", 30, 2)]), pl.DataFrame([_t1("g", "f", "gqa", 60, 5)]))
    assert ranked_only["verdict"].startswith("GQA more concentrated: mixed ") and "(ranked) MHA fewer" in ranked_only["verdict"]


def test_robustness_pairs_within_families_and_reuses_mha_query_rows_for_kv():
    q = pl.DataFrame([_t1("toy_mha", "toy", "mha", 30, 5), _t1("toy_gqa", "toy", "gqa", 60, 2),
                      _t1("big", "other", "gqa", 90, 1)])
    kv = pl.DataFrame([_t1("toy_gqa", "toy", "gqa", 80, 1, n_units=4)])
    df = robustness({("ioi", "zero-query"): q, ("ioi", "zero-kv"): kv,
                     ("facts", "mean-query"): pl.DataFrame([_t1("x", "fam", "gqa", 10, 2)])})
    rows = _by_key(df)
    assert rows[("ioi", "zero", "query")]["comparison"] == "within toy"  # 'big' is not in the pair
    assert rows[("ioi", "zero", "query")]["gqa_models"] == "toy_gqa"
    assert rows[("ioi", "zero", "kv")]["mha_models"] == "toy_mha"  # from the query table
    # the MHA model's 16 kv units (its heads) against the GQA model's 4 kv groups: described, no verdict
    assert rows[("ioi", "zero", "kv")]["verdict"].startswith("descriptive: unit counts differ (MHA 16, GQA 4 units)")
    assert rows[("ioi", "zero", "kv")]["gqa_top_head_pct"] == 80  # the numbers stay
    assert rows[("facts", "mean", "query")]["verdict"].startswith("n/a")


def test_specificity_verdict():
    assert specificity_verdict([0.05, 0.1], 0.01) == "specific"
    assert specificity_verdict([0.05, 0.1], float("nan")) == "specific"  # no usable neutral text
    assert specificity_verdict([0.9, 0.7], 0.02) == "breaks everything"
    assert specificity_verdict([0.9, 0.1], 0.02) == "breaks other tasks"
    assert specificity_verdict([0.05, 0.1], 0.4) == "breaks other tasks"  # plain text suffers
    assert specificity_verdict([0.3, 0.1], 0.01) == "partly shared"


def test_specificity_of_a_run_of_one_task_is_not_testable():
    """No other task measured (an IOI-only run): nothing says the unit is specific to its task;
    harm to plain text is still a finding."""
    nan = float("nan")
    assert specificity_verdict([], nan) == "not testable (no other task measured)"
    assert specificity_verdict([nan], 0.01) == "not testable (no other task measured)"
    assert specificity_verdict([], 0.4) == "breaks other tasks"
    assert specificity_verdict([], 0.04, intervals=([], (0.0, 0.1))) == \
        "unclear (not testable (no other task measured) or partly shared)"


def test_stability_splits_find_a_planted_difference():
    """Unit u0 matters only on ABBA prompts, u1 only on BABA: the split sees different top units."""
    n = 8
    order = np.array(["ABBA", "BABA"] * (n // 2))
    clean = 4.0 + 0.01 * np.arange(n)
    pp = pl.DataFrame({"row": np.arange(n), "clean": clean, "u0": np.where(order == "ABBA", 1.0, clean),
                       "u1": np.where(order == "BABA", 0.0, clean), "u2": clean - 0.1})
    data = pl.DataFrame({"order": order, "input_ids": [[1, 2]] * n})
    rows, maps = stability_rows("ioi", "m", "gqa", "zero-query", pp, data)
    by = {r["split"]: r for r in rows}
    t = by["template order"]
    assert (t["top_a"], t["top_b"], t["same_top"], t["n_a"], t["n_b"]) == ("u0", "u1", False, 4, 4)
    drops = dict(unit_drops(pp, order == "ABBA", True).iter_rows())
    assert drops["u0"] == pytest.approx(3.03) and drops["u1"] == pytest.approx(0.0)
    assert "clean LD" in by and len(maps) == 2


def test_robustness_layer_rows_need_both_models_and_no_task_behaviour_enters_no_verdict():
    """Layer units: no stand-in from the query table (a layer is a layer under MHA and GQA). A model
    whose clean IOI logit difference is negative is left out of the verdict and named."""
    q = pl.DataFrame([_t1("toy_mha", "toy", "mha", 30, 5), _t1("toy_gqa", "toy", "gqa", 60, 2)])
    layer = pl.DataFrame([_t1("toy_gqa", "toy", "gqa", 90, 1, n_units=2)])
    layer_both = pl.DataFrame([_t1("toy_mha", "toy", "mha", 70, 2, n_units=2), _t1("toy_gqa", "toy", "gqa", 90, 1, n_units=2)])
    dead = q.with_columns(task_behaviour=pl.Series([False, True]), baseline_ld=pl.Series([-0.1, 3.0]))
    df = robustness({("ioi", "zero-query"): q, ("ioi", "zero-layer"): layer, ("induction", "zero-layer"): layer_both,
                     ("facts", "zero-query"): dead})
    rows = _by_key(df)
    assert rows[("ioi", "zero", "layer")]["verdict"].startswith("n/a: needs an MHA and a GQA model")
    assert rows[("induction", "zero", "layer")]["verdict"].startswith("GQA more concentrated: yes")
    assert rows[("facts", "zero", "query")]["verdict"] == "n/a: no task behaviour on one side"
    assert rows[("facts", "zero", "query")]["no_task_behaviour"] == "toy_mha"


def test_table2_leaves_the_sign_flip_of_a_model_without_task_behaviour_empty():
    from circuitloc.report.tables.localization import table2

    def curve(clean, top):
        return pl.DataFrame([{"method": "ranked", "step": 1, "unit": "L1", "layer": 1, "head": 0, "ld": top,
                              "damage": 1 - top / clean, "clean": clean, "floor": 0.0, "metric": "ld",
                              "n_prompts": 10, "prompts": "heldout"}])

    ctrl = pl.DataFrame({"ld": [1.0], "unit": ["L0"], "layer": [0], "head": [0]})
    cards = {m: model_card(attention="gqa") for m in ("ok", "dead")}
    t2 = table2("ioi", cards, {"ok": curve(2.0, -0.5), "dead": curve(-0.2, 0.3)}, {"ok": ctrl, "dead": ctrl})
    t2 = {r["model"]: r for r in t2.iter_rows(named=True)}
    assert t2["ok"]["sign_flip"] is True
    assert t2["dead"]["sign_flip"] is None and not t2["dead"]["task_behaviour"]
    assert t2["ok"]["top_layer"] == "L1" and "top_head" not in t2["ok"]  # a layer unit: the column says layer


def test_heatmap_and_table1_accept_layer_units():
    from circuitloc.engine.ablation import units
    from circuitloc.report.figures.plots import heatmaps

    card = model_card(n_layers=3, n_heads=4, n_kv_heads=2)
    rows = units(card, "layer")
    assert [u["unit"] for u in rows] == ["L0", "L1", "L2"] and all(u["heads"] == [0, 1, 2, 3] for u in rows)
    import pandas as pd  # plots.py takes pandas on this branch (a figure test: unchanged)

    scores = pd.DataFrame([{"layer": u["layer"], "head": u["head"], "unit": u["unit"], "drop": d}
                           for u, d in zip(rows, (0.1, 2.0, 0.3))])
    fig = heatmaps({"m": scores}, title="layer units")
    assert fig.axes[0].get_xlabel() == "head"


def test_compare_reads_the_held_out_top_head_score_where_the_curves_were_held_out():
    """In-sample GQA wins the top head (60 vs 30) but held out it loses (20 vs 28): the verdict and
    the reported means follow the held-out numbers, and say so; under curves.prompts: all the
    in-sample column is read."""
    m = {**_t1("m", "f", "mha", 30, 5), "curve_prompts": "heldout", "top_head_pct_heldout": 28.0}
    g = {**_t1("g", "f", "gqa", 60, 2), "curve_prompts": "heldout", "top_head_pct_heldout": 20.0}
    out = compare(pl.DataFrame([m]), pl.DataFrame([g]))
    assert (out["mha_top_head_pct"], out["gqa_top_head_pct"]) == (28.0, 20.0)
    assert out["top_head_prompts"] == "heldout" and out["verdict"].startswith("GQA more concentrated: mixed")
    out = compare(pl.DataFrame([{**m, "curve_prompts": "all"}]), pl.DataFrame([{**g, "curve_prompts": "all"}]))
    assert (out["mha_top_head_pct"], out["top_head_prompts"]) == (30, "scoring")
    assert out["verdict"].startswith("GQA more concentrated: yes")


def test_specificity_verdict_decides_a_cut_only_outside_its_interval():
    """0.5084 against the 0.5 cut with an interval 0.2 wide decides nothing."""
    nan = float("nan")
    assert specificity_verdict([0.5084, 0.1], nan, intervals=([(0.41, 0.61), (0.05, 0.15)], (nan, nan))) == \
        "unclear (partly shared or breaks other tasks)"
    assert specificity_verdict([0.5084, 0.1], nan, intervals=([(0.502, 0.52), (0.05, 0.15)], (nan, nan))) == \
        "breaks other tasks"
    assert specificity_verdict([0.1, 0.05], 0.01, intervals=([(0.05, 0.15), (0.0, 0.1)], (0.0, 0.02))) == "specific"
    assert specificity_verdict([0.1, 0.05], 0.01, intervals=([(0.05, 0.25), (0.0, 0.1)], (0.0, 0.02))) == \
        "unclear (specific or partly shared)"


@pytest.mark.slow  # a simulation: 300 random cases of 400 draws (pyproject's slow marker)
def test_an_interval_verdict_is_every_point_verdict_inside_its_intervals():
    """Independent check: values drawn anywhere inside the intervals, judged as points, give exactly
    the decided verdict, or one of the verdicts an 'unclear (a or b)' names (and, over many draws, all)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        centre = rng.uniform(0, 1, 2)
        width = rng.uniform(0, 0.3, 2)
        ivs = [(c - w / 2, c + w / 2) for c, w in zip(centre, width)]
        rise = rng.uniform(0, 0.4)
        rise_iv = (rise - 0.05, rise + 0.05)
        got = specificity_verdict(list(centre), rise, intervals=(ivs, rise_iv))
        seen = {specificity_verdict([rng.uniform(*iv) for iv in ivs], rng.uniform(*rise_iv)) for _ in range(400)}
        named = set(got.removeprefix("unclear (").removesuffix(")").split(" or ")) if got.startswith("unclear") \
            else {got}
        assert seen <= named, (got, seen)
        if not got.startswith("unclear"):
            assert seen == {got}
