"""Guided greedy: attribution proposes, the exact engine decides. On a planted-circuit model the guided
greedy (one exact run per step) picks the planted heads, as the exact greedy does, and writes its
audit rows; with attribution made wrong on purpose, the audit says so."""

import numpy as np
import polars as pl
import pytest
import torch
from helpers import model_card
from test_planted import OFFSET, writer_model

from circuitloc import io
from circuitloc.engine import ablation, greedy
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts
from circuitloc.tasks.registry import TASKS

H, D = 4, 16
# planted: L1H2 (3u) and L0H3 (1u) carry the answer; L0H1 writes against it (ablating it helps)
WRITERS = ((1, 2, 3.0), (0, 3, 1.0), (0, 1, -0.5))


def _setup():
    m = writer_model(H, OFFSET, WRITERS)
    card = model_card(n_layers=2, n_heads=H, n_kv_heads=H, d_head=D // H, attention="mha")
    n = 4
    p = Prompts(torch.randint(3, 8, (n, 5)), torch.full((n,), 4), {"io_id": torch.full((n,), 1),
                                                                  "s_id": torch.full((n,), 2)})
    probe = ablation.Probe(Scanner(m, H, D // H), p, TASKS["ioi"])
    clean = float(probe.means([{}])[0])
    # the ranking puts the planted heads last, so a guided pick cannot come from the rank order
    us = ablation.units(card, "query")
    planted = {"L1H2", "L0H3"}
    ranked = [u for u in us if u.label not in planted] + [u for u in us if u.label in planted]
    return probe, ranked, ablation.Baseline(clean, 0.0)


def test_guided_greedy_picks_the_planted_heads_and_writes_its_audit_rows():
    probe, ranked, base = _setup()
    exact = greedy.greedy_curve(probe, ranked, base, greedy.Greedy(len(ranked), 2))
    plan = greedy.Greedy(len(ranked), 2, guided=1, audit=0.5, attribution="linear")
    rows = greedy.greedy_curve(probe, ranked, base, plan)
    assert [r["unit"] for r in rows] == [r["unit"] for r in exact] == ["L1H2", "L0H3"]
    assert [r["damage"] for r in rows] == pytest.approx([r["damage"] for r in exact])
    assert [r["chosen_by"] for r in exact] == ["exact", "exact"]
    # audit 0.5: the first step audited (the whole pool run, the exact best taken), the second guided
    assert [(r["chosen_by"], r["audited"]) for r in rows] == [("exact", True), ("guided", False)]
    assert rows[0]["audit_agrees"] and rows[0]["audit_gap"] == pytest.approx(0.0, abs=1e-6)
    # the columns a curve file gets: null on the rows of other steps and methods
    df = io.frame([{"method": "ranked", "step": 1, "damage": 0.5}] + rows)
    assert df["audit_agrees"].to_list() == [None, True, None]
    assert df.filter(pl.col("method") == "greedy")["chosen_by"].to_list() == ["exact", "guided"]


def test_the_audit_flags_attribution_made_wrong_on_purpose():
    probe, ranked, base = _setup()

    def backwards(sel, pool, chosen, plan):  # the true estimates, negated: the worst looks best
        return -greedy._estimates(sel, pool, chosen, plan)

    audited = greedy.greedy_curve(probe, ranked, base, greedy.Greedy(len(ranked), 2, guided=1, audit=1.0, attribution="linear"),
                                  estimate=backwards)
    assert [r["unit"] for r in audited] == ["L1H2", "L0H3"]  # audited steps take the exact best
    assert not any(r["audit_agrees"] for r in audited)
    assert all(r["audit_gap"] > 0.05 for r in audited)
    assert audited[0]["audit_guided_unit"] == "L0H1"  # ablating the counter-writer raises the metric
    blind = greedy.greedy_curve(probe, ranked, base, greedy.Greedy(len(ranked), 2, guided=1, audit=0.0, attribution="linear"),
                                estimate=backwards)
    assert [r["unit"] for r in blind][0] == "L0H1" and not any(r["audited"] for r in blind)


def test_audited_steps_are_evenly_spaced_from_the_first():
    plan = greedy.Greedy(10, 12, guided=2, audit=0.25, attribution="linear")
    assert [k for k in range(12) if plan.audited(k)] == [0, 4, 8]
    assert not any(greedy.Greedy(10, 12).audited(k) for k in range(12))  # exact greedy: no audit
    assert all(greedy.Greedy(10, 12, guided=2, audit=1.0, attribution="linear").audited(k) for k in range(12))
    assert np.isclose(sum(greedy.Greedy(10, 60, guided=8, audit=0.25, attribution="linear").audited(k) for k in range(60)), 15)


def test_curve_settings_read_the_guided_keys_and_default_to_the_exact_greedy():
    from circuitloc.engine.settings import CurveSettings

    base = {"methods": ["ranked", "greedy"], "max_steps": 5, "control_draws": 2, "prompts": "all",
            "greedy_candidates": 40, "greedy_steps": 60}
    exact = CurveSettings.of(base)
    assert (exact.greedy_guided, exact.greedy_audit, exact.greedy_attribution) == (None, 0.0, "linear")
    guided = CurveSettings.of({**base, "greedy_guided": 8, "greedy_audit": 0.25, "greedy_attribution": "ig",
                               "ig_steps": 3})
    assert (guided.greedy_guided, guided.greedy_audit, guided.greedy_attribution, guided.ig_steps) == (8, 0.25, "ig", 3)
