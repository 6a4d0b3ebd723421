"""The ranked curve's early stop (curves.ranked_stop_damage, ranked_stop_patience): a curve that
stops once the task is gone reports the heads-to-threshold of the same curve run in full
(metrics.HeadsTo, as Table 1 reads it), says where and why it stopped, and a stop below the
threshold is refused. Its curve area (metrics.curve_area) is computed from the steps that ran, the
last damage held to the end (as any curve's past max_steps; docs/method.md): the full curve's area
where that curve stays at damage >= 1 after the stop, larger where it falls back below 1 (issue
64: 0.996172 stopped against 0.996001 in full), never smaller with a stop damage of 1. The stop is
off by default (config/config.yaml), so the default run's areas are the full curves'."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from circuitloc import metrics
from circuitloc.engine.ablation import Baseline, RankedPlan, ranked_curve
from circuitloc.engine.settings import CurveSettings
from circuitloc.units import Unit

WEIGHTS = [0.3, 0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.08, 0.05, 0.05, 0.02, 0.02, 0.01, 0.01, 0.01, 0.01]
UNITS = [Unit(f"L{i // 4}H{i % 4}", i // 4, i % 4, (i % 4,)) for i in range(len(WEIGHTS))]
W = {u.label: w for u, w in zip(UNITS, WEIGHTS)}


class Stub:
    """A probe whose metric is 1 minus the ablated units' weights (at most 1.3 removed: past the
    task's floor 0, so damage is clipped at 1 in the area), on 3 identical prompts; counts its steps."""

    task = SimpleNamespace(metric_name="m", extra={}, higher_is_better=True)
    resumes = True

    def __init__(self):
        self.steps = 0

    def _value(self, units):
        return 1.0 - min(1.3, sum(W[u.label] for u in units))

    def run_extend(self, chosen, additions, extra=False, progress=None):
        self.steps += len(additions)
        return {"m": torch.tensor([[self._value(list(chosen) + [u])] * 3 for u in additions])}


def measures(rows):
    d = np.array([r["damage"] for r in rows])
    return (metrics.HeadsTo.of_curve(d, 0.8, len(UNITS)), metrics.curve_area(d, len(UNITS)))


# damage after each step: gone (>= 1) for steps 2 to 6, back below 1 from step 7 (a unit whose
# ablation restores the task, as the 200-step curve did), then above 1 again
FALLS_BACK = [0.7, 1.05, 1.1, 1.1, 1.1, 1.1, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


class FallsBack(Stub):
    """A probe whose damage after k units is FALLS_BACK[k - 1] (clean 1, floor 0)."""

    def _value(self, units):
        return 1.0 - FALLS_BACK[len(units) - 1]


def test_a_stopped_curves_area_is_that_of_the_steps_that_ran_held_at_the_last_damage():
    full = ranked_curve(FallsBack(), UNITS, Baseline(1.0, 0.0), RankedPlan(len(UNITS)))
    stopped = ranked_curve(FallsBack(), UNITS, Baseline(1.0, 0.0), RankedPlan(len(UNITS), 1.0, 3))
    assert len(stopped) == 4 and stopped[-1]["ranked_stop"] == "damage >= 1 for 3 consecutive steps"
    (h_full, a_full), (h_stop, a_stop) = measures(full), measures(stopped)
    assert h_stop == h_full and h_full.count == 2  # heads-to is exact: the threshold was crossed before the stop
    held = np.r_[FALLS_BACK[:4], [FALLS_BACK[3]] * 12]  # the steps that ran, then the last damage to the end
    d = np.clip(held, 0, 1)
    by_hand = float(np.sum((d[1:] + d[:-1]) / 2) / 16 + d[0] / 2 / 16)  # trapezoids from (0, 0), x = k / 16
    assert a_stop == pytest.approx(by_hand, abs=1e-6)
    assert a_full == pytest.approx(metrics.curve_area(FALLS_BACK, 16), abs=1e-6)
    # the full curve fell back below 1 after the stop, so the stopped area is larger, by the damage it lost there
    lost = np.clip(np.r_[FALLS_BACK[3:]], 0, 1)
    assert a_stop - a_full == pytest.approx(float(np.sum((2 - lost[1:] - lost[:-1]) / 2) / 16), abs=1e-6)
    assert a_stop > a_full


def test_a_stopped_curve_reports_the_full_curves_heads_to_and_area():
    full_probe, stop_probe = Stub(), Stub()
    full = ranked_curve(full_probe, UNITS, Baseline(1.0, 0.0), RankedPlan(len(UNITS)))
    stopped = ranked_curve(stop_probe, UNITS, Baseline(1.0, 0.0), RankedPlan(len(UNITS), 1.0, 3))
    assert len(stopped) < len(full) and stop_probe.steps == len(stopped) < full_probe.steps
    h_full, a_full = measures(full)
    h_stop, a_stop = measures(stopped)
    assert h_stop == h_full and not h_full.bounded
    assert a_stop == pytest.approx(a_full, abs=1e-12)
    # where and why: the last row only; the full curve's damage from there on is >= 1 (what the stop assumes)
    assert [r["ranked_stop"] for r in stopped[:-1]] == [""] * (len(stopped) - 1)
    assert stopped[-1]["ranked_stop"] == "damage >= 1 for 3 consecutive steps"
    assert all(r["damage"] >= 1 for r in full[len(stopped) - 3:])
    assert "ranked_stop" not in full[0]  # no stop configured: the curve file keeps its columns


def test_a_stop_below_the_threshold_is_refused_and_defaults_are_off():
    cfg = {"methods": ["ranked"], "max_steps": 5, "control_draws": 2, "prompts": "all", "threshold": 0.8}
    assert CurveSettings.of(cfg).ranked_stop_damage is None
    assert CurveSettings.of({**cfg, "ranked_stop_damage": 1.0, "ranked_stop_patience": 4}).ranked_stop_patience == 4
    with pytest.raises(ValueError, match="curves.ranked_stop_damage = 0.5 is below curves.threshold = 0.8"):
        CurveSettings.of({**cfg, "ranked_stop_damage": 0.5})
