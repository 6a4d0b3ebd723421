"""Table 1 and Table 2 in the paper's form: at most 12 columns, the top unit's held-out score as
'56% [44, 77]', a count the curve never reached written '> K'."""

import polars as pl

from circuitloc.report.tables.paper import table1_form, table2_form


def test_table1_form():
    df = pl.DataFrame([{"model": "m", "family": "f", "attention": "gqa", "n_params": 135_000_000, "n_units": 270,
                        "baseline_ld": 3.21, "top_head": "L23H3", "top_head_pct_heldout": 55.4,
                        "top_head_pct_heldout_lo": 51.2, "top_head_pct_heldout_hi": 60.6, "heads_to_80": 20.0,
                        "heads_to_80_bounded": True, "heads_to_80_greedy": 3.0, "heads_to_80_greedy_bounded": False,
                        "curve_area": 0.91, "effective_units": 12.3, "damage_note": "", "extra": 1.0}])
    out = table1_form(df).row(0, named=True)
    assert len(out) <= 12 and "extra" not in out
    assert out["top unit score"] == "55% [51, 61]" and out["params"] == "135M" and out["baseline (ld)"] == "3.21"
    assert out["heads-to-80% (greedy)"] == "3" and out["heads-to-80% (ranked)"] == "> 20"
    assert list(out)[:2] == ["model", "attention"]


def test_table2_form():
    df = pl.DataFrame([{"model": "m", "attention": "gqa", "top_kv_group": "L2G0", "ld_clean": 3.0,
                        "ld_top_ablated": -0.5, "drop_pct": 116.7, "sign_flip": True, "control_drop_pct_mean": 2.9,
                        "control_drop_pct_max": 6.0, "control_draws": 4, "damage_note": ""}])
    out = table2_form(df).row(0, named=True)
    assert len(out) <= 12
    assert out["top unit"] == "L2G0" and out["drop"] == "117%" and out["sign flip"] is True
    assert out["clean"] == "3" and out["top unit ablated"] == "-0.5" and out["control mean drop"] == "3%"
