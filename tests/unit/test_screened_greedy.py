"""Screened greedy: every candidate runs on a subsample of the selection prompts, the best few on all
of them, and the exact engine picks among those. On a planted-circuit model it picks the planted
heads as the full greedy does, with fewer forward passes; its audit runs the whole pool; the screen's
probe is the selection probe's prompts and per-prompt replacement rows, exactly."""

import numpy as np
import pytest
import torch
from helpers import model_card
from test_planted import OFFSET, writer_model

from circuitloc.engine import ablation, greedy
from circuitloc.engine.scan import Scanner
from circuitloc.engine.settings import CurveSettings
from circuitloc.plan.config.checks import stop_problem
from circuitloc.prompts import Prompts
from circuitloc.tasks.registry import TASKS

H, D, N = 4, 16, 40
# planted: L1H2 (3u) and L0H3 (1u) carry the answer; L0H1 writes against it (ablating it helps)
WRITERS = ((1, 2, 3.0), (0, 3, 1.0), (0, 1, -0.5))


def _probe(seed: int = 0) -> ablation.Probe:
    g = torch.Generator().manual_seed(seed)
    p = Prompts(torch.randint(3, 8, (N, 5), generator=g), torch.full((N,), 4),
                {"io_id": torch.full((N,), 1), "s_id": torch.full((N,), 2)})
    return ablation.Probe(Scanner(writer_model(H, OFFSET, WRITERS), H, D // H), p, TASKS["ioi"])


def _ranked():
    """Every query head, the planted ones last: a pick cannot come from the rank order."""
    us = ablation.units(model_card(n_layers=2, n_heads=H, n_kv_heads=H, d_head=D // H, attention="mha"), "query")
    planted = {"L1H2", "L0H3"}
    return [u for u in us if u.label not in planted] + [u for u in us if u.label in planted]


def _curve(plan: greedy.Greedy):
    """(rows, forward passes of the selection probe's scanner) of a greedy curve chosen on a fresh
    selection probe and reported on another."""
    sel, report = _probe(0), _probe(1)
    base = ablation.Baseline(float(report.means([{}])[0]), 0.0)
    sel_clean = float(sel.means([{}])[0])
    before = sel.scanner.forward_passes
    rows = greedy.greedy_curve(report, _ranked(), base, plan, select=(sel, sel_clean))
    return rows, sel.scanner.forward_passes - before


def test_the_screen_picks_the_full_greedys_units_with_fewer_forward_passes():
    full, full_passes = _curve(greedy.Greedy(8, 2))
    screened, passes = _curve(greedy.Greedy(8, 2, screen=4, recheck=2, audit=0.0))
    assert [r["unit"] for r in screened] == [r["unit"] for r in full] == ["L1H2", "L0H3"]
    assert [r["damage"] for r in screened] == pytest.approx([r["damage"] for r in full])
    assert [r["chosen_by"] for r in screened] == ["screened", "screened"]
    # the pool of 8 on 4 of 40 prompts and 2 on all 40, against 8 on all 40 (13 full passes; each run's
    # clean start and the resumed layers count too): under the full cost
    assert 0 < passes < 0.6 * full_passes, (passes, full_passes)


def test_the_screens_audit_runs_the_whole_pool_and_says_whether_it_agreed():
    rows, _ = _curve(greedy.Greedy(8, 2, screen=8, recheck=2, audit=0.5))
    assert [(r["chosen_by"], r["audited"]) for r in rows] == [("exact", True), ("screened", False)]
    assert rows[0]["audit_agrees"] and rows[0]["audit_gap"] == pytest.approx(0.0, abs=1e-6)
    # a screen as large as the selection set is no screen: every step exact, nothing audited
    whole, _ = _curve(greedy.Greedy(8, 2, screen=N, recheck=2, audit=0.5))
    assert [(r["chosen_by"], r["audited"]) for r in whole] == [("exact", False)] * 2


def test_the_screens_probe_is_the_selection_probes_rows():
    sel = _probe(0)
    sel.scanner.replacement = {0: torch.randn(N, 5, H, D // H, generator=torch.Generator().manual_seed(3))}
    sub = greedy.screen_probe(sel, 8)
    idx = np.unique(np.linspace(0, N - 1, 8).round().astype(int))
    sets = [{}, {0: [3]}, {0: [1, 3], 1: [2]}]
    full = sel.run(sets)["ld"].numpy()
    assert len(sub.prompts) == 8 and sub.scanner is not sel.scanner and sub.scanner.model is sel.scanner.model
    np.testing.assert_allclose(sub.run(sets)["ld"].numpy(), full[:, idx], rtol=1e-5, atol=1e-5)
    assert sel.scanner.replacement[0].shape[0] == N  # the selection probe's own rows untouched


def test_screen_and_guided_exclude_each_other_and_default_off():
    base = {"methods": ["ranked", "greedy"], "max_steps": 5, "control_draws": 2, "prompts": "all",
            "greedy_candidates": 40, "greedy_steps": 60}
    off = CurveSettings.of(base)
    assert off.greedy_screen is None and off.greedy(label="x").shortlist is None
    on = CurveSettings.of({**base, "greedy_screen": 50, "greedy_recheck": 4}).greedy(label="x")
    assert (on.screen, on.recheck, on.shortlist) == (50, 4, 4)
    both = {**base, "greedy_screen": 50, "greedy_guided": 8}
    assert "greedy_screen" in stop_problem(both) and "greedy_guided" in stop_problem(both)
    with pytest.raises(ValueError, match="greedy_screen"):
        CurveSettings.of(both)
