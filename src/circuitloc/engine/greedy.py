"""Greedy ablation curves: each step adds the unit whose addition does most damage.

Exact (the default): every candidate of the pool is run with the exact engine. Guided
(`Greedy.guided` = c): attribution (`engine.attribution`, computed with the chosen units already
ablated) ranks the pool and only its top c run exactly; the exact engine still picks among them
and reports every number. An audit runs the whole pool on a share of the steps (`Greedy.audit`,
evenly spaced from the first), takes the exact best there, and writes whether the guided choice
was it and by how much damage it fell short. Screened (`Greedy.screen` = n, for large selection sets:
induction's and facts' 200 prompts): every candidate runs exactly on n of the selection prompts
(evenly spaced), the best `Greedy.recheck` of them on all, and the exact engine picks among those,
audited as a guided step is."""

from __future__ import annotations

import copy
import dataclasses
import logging

import numpy as np
import torch

from circuitloc import metrics
from circuitloc.engine.ablation import Baseline, Probe, split_floor, step_rows
from circuitloc.engine.attribution import estimated_drops
from circuitloc.engine.settings import ATTRIBUTIONS, Greedy  # noqa: F401  (re-exported: a greedy curve's plan)

log = logging.getLogger(__name__)

EXACT, GUIDED, SCREENED = "exact", "guided", "screened"  # the curve file's `chosen_by`: how a greedy step was chosen


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
    if plan.shortlist is None or plan.shortlist >= len(pool):
        v = sel.extend(chosen, pool)
        return int(np.argmax(metrics.drop(sel_clean, v, hib))), {"chosen_by": EXACT, "audited": False}
    est = np.asarray(estimate(sel, pool, chosen, plan), float)
    top = [int(i) for i in np.argsort(-est, kind="stable")[: plan.shortlist]]
    if not plan.audited(step):
        drops = np.asarray(metrics.drop(sel_clean, sel.extend(chosen, [pool[i] for i in top]), hib))
        return top[int(np.argmax(drops))], {"chosen_by": GUIDED if plan.guided else SCREENED, "audited": False}
    drops = np.asarray(metrics.drop(sel_clean, sel.extend(chosen, pool), hib))
    best, guided = int(np.argmax(drops)), top[int(np.argmax(drops[top]))]
    return best, {"chosen_by": EXACT, "audited": True, "audit_agrees": guided == best,
                  "audit_guided_unit": pool[guided].label, "audit_drop_gap": float(drops[best] - drops[guided])}


def screen_probe(sel: Probe, n: int) -> Probe:
    """`sel` on n of its prompts, evenly spaced, through a view of its scanner of its own (the same
    model; the per-prompt replacement rows of those prompts; its own kept streams and pass count)."""
    idx = torch.as_tensor(np.unique(np.linspace(0, len(sel.prompts) - 1, n).round().astype(np.int64)))
    sc = copy.copy(sel.scanner)
    sc.replacement = {k: r[idx] if r.dim() == 4 else r for k, r in getattr(sel.scanner, "replacement", {}).items()}
    sc.__dict__.update(_bases=[], forward_passes=0.0)
    return Probe(sc, sel.prompts.take(idx), sel.task)


def _screened(sub: Probe):
    """The screen's ranking as an `estimate`: each candidate's drop on `sub` (the clean metric, one
    number, does not change the order)."""
    return lambda sel, pool, chosen, plan: metrics.drop(0.0, sub.extend(chosen, pool), sel.task.higher_is_better)


def _screen(sel: Probe, plan: Greedy, estimate):
    """(plan, estimate, the screen's probe or None): a screen of at least the selection set's size is
    no screen (every step then runs exactly)."""
    if plan.screen is None:
        return plan, estimate, None
    if plan.screen >= len(sel.prompts):
        return dataclasses.replace(plan, screen=None), estimate, None
    sub = screen_probe(sel, plan.screen)
    return plan, _screened(sub), sub


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
    plan, estimate, sub = _screen(sel, plan, estimate)
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
    if sub is not None and hasattr(sel.scanner, "forward_passes"):  # the screen's passes, in the selection set's
        sel.scanner.forward_passes += sub.scanner.forward_passes * sub.prompts.input_ids.numel() / sel.prompts.input_ids.numel()
    return [{**r, **h} for r, h in zip(step_rows("greedy", chosen, vals, base, task), how)]
