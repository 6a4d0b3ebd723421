"""The conditioning rule: a damage percentage only where the clean metric on the
prompts it is reported on stands clearly above its floor, and a held-out set large enough."""

import math

import numpy as np
import polars as pl
import pytest

from circuitloc.engine import ablation
from circuitloc.report.tables.localization import table1, table2
from circuitloc.stats import Bootstrap, span_interval
from helpers import model_card


def _frames(clean, span_lo, n_curve=100, n_units=4):
    """IOI scores and curves whose clean LD is `clean` on both prompt sets (floor 0), with the
    interval of clean - floor starting at `span_lo`."""
    drops = np.array([0.6, 0.3, 0.2, 0.1]) * clean
    s = pl.DataFrame({"unit": [f"L0H{h}" for h in range(n_units)], "layer": [0] * n_units, "head": list(range(n_units)),
                      "drop": drops, "damage": drops / clean, "ld_clean": [clean] * n_units, "floor": [0.0] * n_units,
                      "n_prompts": [40] * n_units, "metric": ["ld"] * n_units, "clean_span_lo": [span_lo] * n_units,
                      "aligned": [float("nan")] * n_units})
    dmg = np.cumsum([0.6, 0.3, 0.2, 0.1])
    c = pl.DataFrame({"method": ["ranked"] * 4 + ["greedy"] * 2, "step": [1, 2, 3, 4, 1, 2],
                      "unit": [f"L0H{h}" for h in range(4)] + ["L0H0", "L0H1"], "layer": [0] * 6,
                      "head": [0, 1, 2, 3, 0, 1], "ld": list(clean * (1 - dmg)) + list(clean * (1 - dmg[:2])),
                      "damage": list(dmg) + list(dmg[:2]), "clean": [clean] * 6, "floor": [0.0] * 6,
                      "n_prompts": [n_curve] * 6, "prompts": ["heldout"] * 6, "metric": ["ld"] * 6,
                      "clean_span_lo": [span_lo] * 6})
    return s, c


CARD = model_card(family="f", attention="gqa", n_params=1000)


def test_a_clean_metric_near_its_floor_reports_no_percentage():
    """A clean LD of 0.15 whose interval reaches below 0 (like SmolLM2's 13 held-out facts): Table 1
    and Table 2 once reported its top head at thousands of percent; now n/a with the reason, and
    heads-to and the curve area are refused with it."""
    ok_s, ok_c = _frames(3.0, 2.5)
    bad_s, bad_c = _frames(0.15, -0.4)
    t1 = table1("ioi", {"ok": CARD, "bad": CARD}, {"ok": ok_s, "bad": bad_s}, {"ok": ok_c, "bad": bad_c}, 0.8)
    ok, bad = t1.row(0, named=True), t1.row(1, named=True)
    assert ok["damage_ok"] and ok["top_head_pct"] == pytest.approx(60) and ok["heads_to_80"] == 2
    assert bad["task_behaviour"]  # the point estimate is above the floor: the old rule let it through
    assert not bad["damage_ok"] and not bad["score_damage_ok"] and "clean ≈ floor" in bad["damage_note"]
    assert math.isnan(bad["top_head_pct"]) and math.isnan(bad["top_head_pct_heldout"])
    assert bad["heads_to_80"] is None and bad["heads_to_80_greedy"] is None and math.isnan(bad["curve_area"])
    ctrl = pl.DataFrame({"ld": [0.1], "unit": ["L0H3"], "layer": [0], "head": [3]})
    t2 = table2("ioi", {"ok": CARD, "bad": CARD}, {"ok": ok_c, "bad": bad_c}, {"ok": ctrl, "bad": ctrl},
                {"ok": ok_s, "bad": bad_s})
    assert t2["drop_pct"][0] == pytest.approx(60) and math.isnan(t2["drop_pct"][1])
    assert "clean ≈ floor" in t2["damage_note"][1]


def test_a_held_out_set_below_its_minimum_carries_no_percentage():
    s, c = _frames(3.0, 2.5, n_curve=13)
    row = table1("ioi", {"m": CARD}, {"m": s}, {"m": c}, 0.8, min_heldout=20).row(0, named=True)
    assert not row["damage_ok"] and "13 prompts < min_heldout 20" in row["damage_note"]
    assert row["top_head_pct"] == pytest.approx(60)  # the scoring prompts' own estimate stays
    assert math.isnan(row["top_head_pct_heldout"])


def test_threshold_names_every_heads_to_column():
    s, c = _frames(3.0, 2.5)
    t1 = table1("ioi", {"m": CARD}, {"m": s}, {"m": c}, threshold=0.9)
    assert {"heads_to_90", "heads_to_90_greedy", "heads_to_90_bounded"} <= set(t1.columns)
    assert not any(col.startswith("heads_to_80") for col in t1.columns)
    assert t1["heads_to_90"][0] == 3 and t1["heads_to_90_greedy_bounded"][0]  # greedy: 0.9 in 2 steps? no: '> 2'
    # curve area by hand: trapezoids over fractions 1/4: damage 0.6, 0.9, 1.1 -> 1, 1.2 -> 1
    assert t1["curve_area"][0] == pytest.approx((0.3 + 0.75 + 0.95 + 1.0) / 4)


def test_the_span_interval_is_a_bootstrap_of_clean_minus_floor():
    rng = np.random.default_rng(0)
    clean = rng.normal(0.15, 1.0, 13)
    lo, hi = span_interval(clean, 0.0, True, Bootstrap(2000, 0))
    assert lo < 0 < hi and lo < clean.mean() < hi
    lo, hi = span_interval(clean + 5, 0.0, True, Bootstrap(2000, 0))
    assert lo > 0
    # a loss: floor - clean
    lo, _ = span_interval(np.full(10, 1.0), np.full(10, 4.0), False, Bootstrap(100, 0))
    assert lo == pytest.approx(3.0)
    assert ablation.clean_span(clean, 0.0, type("T", (), {"higher_is_better": True}), Bootstrap(2000, 0)) == (
        span_interval(clean, 0.0, True, Bootstrap(2000, 0)))
