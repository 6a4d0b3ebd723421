"""The greedy curve: chosen on one set of prompts, reported on another, and as long as asked. A fake scanner stands in for the model: each prompt set has its own
per-unit damage, so which set chose a unit and which reported it is visible in the result."""

import numpy as np
import pytest
import torch
from helpers import model_card

from circuitloc.engine import ablation
from circuitloc.engine import greedy


class _Task:
    metric_name, higher_is_better, extra = "m", True, {}

    @staticmethod
    def metric(*a):  # never called by the fake scanner
        raise AssertionError


class _Prompts:
    def __init__(self, name, weights):
        self.name, self.weights = name, weights  # weights: {unit label: how much ablating it removes}


class _Scanner:
    """run(prompts, sets): the metric of each set of ablated heads is 10 minus the summed weights of
    the units in it, on every prompt of the set (4 prompts); records which prompt sets it ran."""

    def __init__(self, units):
        self.by_head = {(u["layer"], h): u["unit"] for u in units for h in u["heads"]}
        self.seen = []

    def run(self, prompts, sets, metrics, progress=None):
        self.seen.append(prompts.name)
        vals = []
        for s in sets:
            labels = {self.by_head[(layer, h)] for layer, hs in s.items() for h in hs}
            vals.append(10.0 - sum(prompts.weights.get(u, 0.0) for u in labels))
        return {"m": torch.tensor(vals, dtype=torch.float64)[:, None].repeat(1, 4)}


def _units(n=6):
    return ablation.units(model_card(n_layers=1, n_heads=n, n_kv_heads=n), "query")


def test_greedy_chooses_on_the_selection_prompts_and_reports_on_the_held_out_ones():
    units = _units()
    # scoring prompts: L0H1 matters most; held out: L0H0. A greedy step chosen in-sample on the held-out
    # prompts would take L0H0 first.
    scoring = _Prompts("scoring", {"L0H1": 6.0, "L0H0": 1.0, "L0H2": 0.5})
    heldout = _Prompts("heldout", {"L0H0": 6.0, "L0H1": 2.0, "L0H2": 0.5})
    sel, rep = _Scanner(units), _Scanner(units)
    rows = greedy.greedy_curve(ablation.Probe(rep, heldout, _Task), units, ablation.Baseline(10.0, 0.0), greedy.Greedy(3, 2),
                          select=(ablation.Probe(sel, scoring, _Task), 10.0))
    assert [r["unit"] for r in rows] == ["L0H1", "L0H0"]  # the scoring prompts' order
    # reported on the held-out prompts: 10 - 2 after L0H1, 10 - 8 after L0H0 as well
    assert [r["m"] for r in rows] == pytest.approx([8.0, 2.0])
    assert [r["damage"] for r in rows] == pytest.approx([0.2, 0.8])
    assert set(sel.seen) == {"scoring"} and set(rep.seen) == {"heldout"}  # disjoint: never chosen where reported


def test_greedy_steps_run_past_the_candidate_pool():
    """greedy_steps 5 with a pool of 2 candidates: the pool refills from the ranking, so the curve has
    5 steps (it stopped at 2 before), each unit once."""
    units = _units(6)
    w = {u["unit"]: 1.0 + i for i, u in enumerate(units)}
    p = _Prompts("p", w)
    rows = greedy.greedy_curve(ablation.Probe(_Scanner(units), p, _Task), units, ablation.Baseline(10.0, -100.0), greedy.Greedy(2, 5))
    chosen = [r["unit"] for r in rows]
    assert len(chosen) == 5 and len(set(chosen)) == 5
    # each step takes the better of the next two in rank order: L0H1 (2.0) over L0H0, then L0H2 ...
    assert chosen == ["L0H1", "L0H2", "L0H3", "L0H4", "L0H5"]
    assert np.all(np.diff([r["damage"] for r in rows]) > 0)
