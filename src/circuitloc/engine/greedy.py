"""Greedy ablation curves: each step adds the unit whose addition does most damage.

Exact (the default): every candidate of the pool is run with the exact engine. Guided
(`Greedy.guided` = c): attribution (`engine.attribution`, computed with the chosen units already
ablated) ranks the pool and only its top c run exactly; the exact engine still picks among them
and reports every number. An audit runs the whole pool on a share of the steps (`Greedy.audit`,
evenly spaced from the first), takes the exact best there, and writes whether the guided choice
was it and by how much damage it fell short."""

from __future__ import annotations

import logging

import numpy as np

from circuitloc import metrics
from circuitloc.engine.ablation import Baseline, Probe, split_floor, step_rows
from circuitloc.engine.attribution import estimated_drops
from circuitloc.engine.settings import ATTRIBUTIONS, Greedy  # noqa: F401  (re-exported: a greedy curve's plan)

log = logging.getLogger(__name__)

EXACT, GUIDED = "exact", "guided"  # the curve file's `chosen_by`: how a greedy step was chosen


def _estimates(sel: Probe, pool, chosen, plan: Greedy) -> np.ndarray:
    """The pool's estimated drops with `chosen` ablated (larger: more damage)."""
    return estimated_drops(sel, pool, chosen, plan.ig_steps if plan.attribution == "ig" else 1)


def choose(select: tuple, pool: list, chosen: list, plan: Greedy, step: int, estimate=_estimates) -> tuple[int, dict]:
    """One greedy step on the selection probe (`select`: the probe and its clean metric): (index into `pool` of the unit added, how it was
    chosen: chosen_by, audited and, on an audited step, audit_agrees, audit_drop_gap: the exact
    best's drop minus the guided choice's). `estimate(sel, pool, chosen, plan)`: the attribution
    ranking (a parameter so that a test can make it wrong on purpose)."""
    sel, sel_clean = select
    hib = sel.task.higher_is_better
    if plan.guided is None or plan.guided >= len(pool):
        v = sel.extend(chosen, pool)
        return int(np.argmax(metrics.drop(sel_clean, v, hib))), {"chosen_by": EXACT, "audited": False}
    est = np.asarray(estimate(sel, pool, chosen, plan), float)
    top = [int(i) for i in np.argsort(-est, kind="stable")[: plan.guided]]
    if not plan.audited(step):
        drops = np.asarray(metrics.drop(sel_clean, sel.extend(chosen, [pool[i] for i in top]), hib))
        return top[int(np.argmax(drops))], {"chosen_by": GUIDED, "audited": False}
    drops = np.asarray(metrics.drop(sel_clean, sel.extend(chosen, pool), hib))
    best, guided = int(np.argmax(drops)), top[int(np.argmax(drops[top]))]
    return best, {"chosen_by": EXACT, "audited": True, "audit_agrees": guided == best,
                  "audit_guided_unit": pool[guided].label, "audit_drop_gap": float(drops[best] - drops[guided])}


def greedy_curve(probe: Probe, ranked_units, base: Baseline, plan: Greedy, select: tuple | None = None,
                 estimate=_estimates):
    """Each step adds the candidate whose addition does most damage; the pool holds the top
    `plan.candidates` units of the ranking not yet chosen and refills from it after every step, so
    the curve runs up to `plan.steps` (or every unit), not only as many steps as the pool is large.

    `select` = (probe, clean) of the prompts the choice is made on (the scoring prompts); the curve
    is reported on `probe` (held out), so heads-to-threshold on it is not selected in-sample.
    Without `select` the choice is made on `probe` itself (in-sample). It stops early once the
    reported damage reaches `plan.stop_damage` (1.0: the task is gone). Each row says how its
    step was chosen (`choose`); an audited step's gap is also given in damage (`audit_gap`: the
    drop gap over the selection prompts' clean minus the curve's mean floor)."""
    task = probe.task
    sel, sel_clean = select if select is not None else (probe, base.clean)
    floor = split_floor(base.floor)[1]
    span = float(metrics.drop(sel_clean, floor, task.higher_is_better))
    ranked_units = list(ranked_units)
    chosen, vals, how = [], [], []
    for step in range(min(plan.steps, len(ranked_units))):
        taken = {u.label for u in chosen}
        pool = [u for u in ranked_units if u.label not in taken][: plan.candidates]
        pick, info = choose((sel, sel_clean), pool, chosen, plan, step, estimate)
        if info["audited"]:
            info["audit_gap"] = info["audit_drop_gap"] / span if span else float("nan")
        chosen.append(pool[pick])
        how.append(info)
        vals.append(float(probe.extend(chosen[:-1], chosen[-1:])[0]))
        dmg = float(metrics.damage(base.clean, vals[-1], floor, task.higher_is_better))
        log.info("%s: step %d of at most %d, %s (%s%s), damage %.3f", plan.label, len(chosen),
                 min(plan.steps, len(ranked_units)), chosen[-1].label, info["chosen_by"],
                 "" if not info["audited"] else f", audit {'agrees' if info['audit_agrees'] else 'differs'}", dmg)
        if plan.stop_damage is not None and dmg >= plan.stop_damage:
            break
    return [{**r, **h} for r, h in zip(step_rows("greedy", chosen, vals, base, task), how)]
