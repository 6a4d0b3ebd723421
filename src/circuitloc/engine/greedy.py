"""Greedy ablation curves: each step adds the unit whose addition does most damage."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from circuitloc import metrics
from circuitloc.engine.ablation import Baseline, Probe, split_floor, step_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Greedy:
    """A greedy curve's plan (config curves: greedy_candidates, greedy_steps, greedy_stop_damage)."""

    candidates: int
    steps: int
    stop_damage: float | None = None
    label: str = "greedy curve"  # the job's name in its log lines


def greedy_curve(probe: Probe, ranked_units, base: Baseline, plan: Greedy, select: tuple | None = None):
    """Each step adds the candidate whose addition does most damage; the pool holds the top
    `plan.candidates` units of the ranking not yet chosen and refills from it after every step, so
    the curve runs up to `plan.steps` (or every unit), not only as many steps as the pool is large.

    `select` = (probe, clean) of the prompts the choice is made on (the scoring prompts); the curve
    is reported on `probe` (held out), so heads-to-threshold on it is not selected in-sample.
    Without `select` the choice is made on `probe` itself (in-sample). It stops early once the
    reported damage reaches `plan.stop_damage` (1.0: the task is gone)."""
    task = probe.task
    sel, sel_clean = select if select is not None else (probe, base.clean)
    floor = split_floor(base.floor)[1]
    ranked_units = list(ranked_units)
    chosen, vals = [], []
    for _ in range(min(plan.steps, len(ranked_units))):
        taken = {u.label for u in chosen}
        pool = [u for u in ranked_units if u.label not in taken][: plan.candidates]
        v = sel.extend(chosen, pool)
        best = int(np.argmax(metrics.drop(sel_clean, v, task.higher_is_better)))
        chosen.append(pool[best])
        vals.append(float(probe.extend(chosen[:-1], chosen[-1:])[0]))
        dmg = float(metrics.damage(base.clean, vals[-1], floor, task.higher_is_better))
        log.info("%s: step %d of at most %d, %s, damage %.3f", plan.label, len(chosen),
                 min(plan.steps, len(ranked_units)), chosen[-1].label, dmg)
        if plan.stop_damage is not None and dmg >= plan.stop_damage:
            break
    return step_rows("greedy", chosen, vals, base, task)
