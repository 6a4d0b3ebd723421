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


def test_a_guided_score_job_writes_marked_scores_that_its_curve_job_reads(tmp_path, tiny_dirs, caplog):
    """The score and curve jobs (engine.pipeline) on the tiny GQA model and IOI-shaped prompts: the
    guided job's table marks its estimates and its per-prompt table holds the units scored exactly;
    the curve job ranks by it with the exact units first; the exact job's table is today's."""
    from helpers import card_for, ioi_shaped

    from circuitloc import io
    from circuitloc.engine import pipeline
    from circuitloc.engine.settings import CurveFiles, CurveSettings, ScoreFiles
    from circuitloc.tasks.common import mark_scoring

    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    io.write_parquet(mark_scoring(ioi_shaped(32, 4, seed=3), 8), tmp_path / "ioi.parquet")
    curves = CurveSettings.of({"n_curve": 16, "max_steps": 3, "methods": ["ranked"], "control_draws": 2,
                               "prompts": "heldout"})
    plan = ScoreSettings("guided", audit=4, level=0.2, top=2)
    out = {}
    for name, scores in (("exact", ScoreSettings()), ("guided", plan)):
        job = JobSettings(card=card, batch_tokens=4096, task="ioi", min_group=2, seed=0, curves=curves,
                          bootstrap=BOOT, scores=scores)
        files = ScoreFiles(str(tmp_path / f"{name}.scores.parquet"), str(tmp_path / f"{name}.prompts.parquet"))
        with caplog.at_level("INFO", logger="circuitloc"):
            pipeline.score(job, tmp_path / "ioi.parquet", "zero-query", files)
        pipeline.curve(job, tmp_path / "ioi.parquet", "zero-query",
                       CurveFiles(files.scores, str(tmp_path / f"{name}.curve.parquet"),
                                  str(tmp_path / f"{name}.control.parquet")))
        out[name] = (io.read_parquet(files.scores), io.read_parquet(files.prompts),
                     io.read_parquet(str(tmp_path / f"{name}.curve.parquet")))
    (es, epp, ec), (gs, gpp, gc) = out["exact"], out["guided"]
    assert "estimated" not in es.columns and "drop_bound" not in es.columns
    assert gs.columns == es.columns + ["estimated", "drop_bound"]
    exact_units = gs.filter(~pl.col("estimated"))["unit"].to_list()
    assert len(exact_units) < len(gs)  # at least one unit left to attribution (11 of 12 scored here)
    assert gpp.columns == ["row", "floor", "clean"] + exact_units
    assert epp.columns == ["row", "floor", "clean"] + es["unit"].to_list()
    np.testing.assert_allclose(gpp.to_numpy(), epp.select(gpp.columns).to_numpy(), atol=1e-6)
    ref = es.filter(pl.col("unit").is_in(exact_units))
    np.testing.assert_allclose(gs.filter(~pl.col("estimated"))["drop"].to_numpy(), ref["drop"].to_numpy(), atol=1e-6)
    assert metrics.top(gs)["unit"] == metrics.top(es)["unit"]
    ranked = gc.filter(pl.col("method") == "ranked")["unit"].to_list()
    assert ranked[: plan.top] == ec.filter(pl.col("method") == "ranked")["unit"][: plan.top].to_list()
    assert ranked[: plan.top] == metrics.rank(es)["unit"][: plan.top].to_list()
    assert any("guided scan: 12 units, 4 audited" in r.getMessage() for r in caplog.records)
