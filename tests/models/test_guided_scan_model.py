"""The guided scan (engine.guided_scan) on a tiny random model against the exact scan: the rows it
scores exactly are the exact scan's rows (drop, damage, intervals), its top unit is the exact
scan's, the per-prompt table holds the same values for those units, and the others are marked
estimated with the attribution's estimate and a bound; for a zero and a replacement (mean-style)
ablation. The exact scan's table is today's: no `estimated` or `drop_bound` column, read as all exact."""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
from helpers import ld, random_prompts
from transformers import Qwen2Config, Qwen2ForCausalLM

from circuitloc import metrics
from circuitloc.engine.ablation import Probe, score_units
from circuitloc.engine.attribution import estimated_drops
from circuitloc.engine.guided_scan import guided_scores
from circuitloc.engine.scan import Scanner
from circuitloc.engine.settings import JobSettings, ScoreSettings
from circuitloc.stats import Bootstrap
from circuitloc.units import Unit

VOCAB, L, H, DH = 40, 4, 8, 8
TASK = SimpleNamespace(metric_name="ld", metric=ld, extra={"neg": lambda lg, f: -ld(lg, f)}, higher_is_better=True)
PLAN = ScoreSettings(method="guided", audit=9, level=0.1, top=3, batch=4)
BOOT = Bootstrap(200, 0)


def probe(replacement=None):
    torch.manual_seed(3)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=H * DH, intermediate_size=128, num_hidden_layers=L,
                      num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=64)
    sc = Scanner(Qwen2ForCausalLM(cfg).eval(), n_heads=H, d_head=DH, max_batch_tokens=64, replacement=replacement)
    return Probe(sc, random_prompts(VOCAB, n=12, seed=4), TASK)


UNITS = [Unit(f"L{layer}H{h}", layer, h, (h,)) for layer in range(L) for h in range(H)]


@pytest.mark.parametrize("replaced", [False, True])
def test_guided_rows_are_the_exact_scans_rows(replaced):
    g = torch.Generator().manual_seed(0)
    repl = {layer: torch.randn(12, 8, H, DH, generator=g) for layer in range(L)} if replaced else None
    exact, exact_pp = score_units(probe(repl), UNITS, 0.2, bootstrap=BOOT)
    guided, guided_pp, walk = guided_scores(probe(repl), UNITS, 0.2, PLAN, seed=0, bootstrap=BOOT)
    assert guided["unit"].to_list() == exact["unit"].to_list()  # one row per unit, in the units' order
    est = metrics.estimated(guided)
    assert est.any() and (~est).sum() == len(walk.exact) < len(UNITS)  # some units were left to attribution
    ex = guided.filter(~pl.col("estimated"))
    ref = exact.filter(pl.col("unit").is_in(ex["unit"].to_list()))
    for col in ("drop", "damage", "ld_ablated", "neg_ablated", "drop_lo", "drop_hi", "damage_lo", "damage_hi"):
        np.testing.assert_allclose(ex[col].to_numpy(), ref[col].to_numpy(), atol=1e-6, err_msg=col)
    assert metrics.top(guided)["unit"] == metrics.top(exact)["unit"]
    assert metrics.top(guided)["drop"] == pytest.approx(metrics.top(exact)["drop"], abs=1e-6)
    # the ranking's first `top` units are the exact scan's top units, exact
    assert metrics.rank(guided)["unit"][: PLAN.top].to_list() == metrics.rank(exact)["unit"][: PLAN.top].to_list()
    assert not metrics.rank(guided)["estimated"][: PLAN.top].any()
    # estimated rows: the attribution's estimate, its bound, no interval
    rest = guided.filter(pl.col("estimated"))
    want = estimated_drops(probe(repl), UNITS)[[UNITS.index(next(u for u in UNITS if u.label == x))
                                                 for x in rest["unit"]]]
    np.testing.assert_allclose(rest["drop"].to_numpy(), want, atol=1e-6)
    np.testing.assert_allclose(rest["drop_bound"].to_numpy(), want + walk.q, atol=1e-6)
    assert rest["drop_lo"].is_nan().all() and rest["neg_ablated"].is_nan().all()
    assert ex["drop_bound"].is_nan().all()
    # per prompt: the clean run and the units scored exactly, as the exact scan has them
    assert guided_pp.columns == ["clean"] + ex["unit"].to_list()
    np.testing.assert_allclose(guided_pp.to_numpy(), exact_pp.select(guided_pp.columns).to_numpy(), atol=1e-6)


def test_the_exact_scan_is_todays_table():
    exact, _ = score_units(probe(), UNITS[:6], 0.2, bootstrap=BOOT)
    assert "estimated" not in exact.columns and "drop_bound" not in exact.columns
    assert not metrics.estimated(exact).any()
    card = SimpleNamespace(name="tiny")
    assert JobSettings.from_params({"batch_tokens": 64}, card).scores.method == "exact"
    job = JobSettings.from_params({"batch_tokens": 64, "opts": {"scores": {"method": "guided", "audit": 9,
                                                                           "level": 0.1, "top": 3}}}, card)
    assert job.scores == ScoreSettings("guided", 9, 0.1, 3)
