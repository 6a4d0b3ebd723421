"""Guided scan (config `scores.method: guided`; exact is the default): attribution proposes, the
exact engine scores the units that can matter, and a random audit bounds the rest.

The exact scan ablates every unit alone on the scoring prompts (K runs). The curves rely only on
the top N units of its ranking (`ScoreSettings.top`: the ranked curve's max_steps, the greedy
pool), so most of those runs only confirm that a unit is not among them. The guided scan:

1. estimates every unit's drop (`est`) by attribution (`engine.attribution.estimated_drops`: one
   forward and one backward to the head outputs, with the job's replacement: zero, mean or resample);
2. audits: draws m = `audit` units uniformly at random (seeded by the run's seed), scores them
   exactly and takes their residuals r = exact - est;
3. bounds: q = the ceil((1 - level)(m + 1))-th smallest residual, the split-conformal upper
   quantile. A unit not audited is exchangeable with the audited ones (the audit is a uniform
   random draw), so P(exact <= est + q) >= 1 - level for it: the bound est + q is missed with
   probability at most `level` per unit (marginally, over the audit's draw; the expected number of
   units above their bound is at most level times the units not audited, whichever are skipped);
4. scores exactly, in descending est and `batch` units per run, every unit whose bound est + q
   reaches the cutoff, the N-th largest exact drop scored so far (minus infinity until N are), and
   stops at the first unit whose bound is below it: every later unit's est, hence bound, is lower,
   and the cutoff only rises. A skipped unit can be among the true top N only if it is above its
   bound, so each of the top N is scored exactly except with probability at most `level`.

What it does not cover: the guarantee is per unit drawn at random, and the top units are not
random units. A unit whose attribution error is unlike most units' (e.g. an important head that
attribution gets backwards) is bounded only if the audit happens to draw it:
tests/unit/test_guided_scan.py shows both outcomes, and docs/method.md how often SmolLM2-135M's
top units were missed (often: exact stays the default). A unit not scored exactly
keeps est as its drop, is marked `estimated` and carries its bound (`drop_bound`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import torch

from circuitloc import metrics
from circuitloc.engine.ablation import Probe, as_sets, score_table, split_floor
from circuitloc.engine.attribution import estimated_drops
from circuitloc.engine.settings import ScoreSettings
from circuitloc.stats import Bootstrap
from circuitloc.units import Unit

log = logging.getLogger(__name__)


def conformal_offset(residuals, level: float) -> float:
    """q: the ceil((1 - level)(m + 1))-th smallest of the m residuals (split-conformal upper
    quantile; a non-finite residual counts as +infinity, which can only widen the bound)."""
    r = np.asarray(residuals, float)
    r = np.where(np.isfinite(r), r, np.inf)
    k = math.ceil((1 - level) * (len(r) + 1) - 1e-9)
    if k > len(r):
        raise ValueError(f"{len(r)} audited units give no finite bound at level {level}: "
                         f"need at least {k} (scores.audit)")
    return float(np.sort(r)[k - 1])


@dataclass
class Walk:
    """What a guided scan did: `est` (every unit's estimate), `audit` (indices drawn), `exact`
    {index: exact drop} of every unit scored exactly, `q` (NaN when every unit was scored)."""

    est: np.ndarray
    audit: list[int]
    exact: dict = field(default_factory=dict)
    q: float = float("nan")

    @property
    def scored(self) -> list[int]:
        """Indices scored exactly, ascending (the units' order)."""
        return sorted(self.exact)

    def bound(self) -> np.ndarray:
        """est + q for every unit (its drop is at most this with probability >= 1 - level)."""
        return self.est + self.q


def walk(est, exact, plan: ScoreSettings, rng: np.random.Generator) -> Walk:
    """The audit, the bound and the stopping rule (module docstring), on plain arrays: `est` the
    estimates, `exact(indices) -> exact drops` the exact engine (or a simulation's truth)."""
    est = np.asarray(est, float)
    est = np.where(np.isnan(est), np.inf, est)  # no estimate: always scored
    n = len(est)
    audit = sorted(int(i) for i in rng.choice(n, size=min(plan.audit, n), replace=False))
    w = Walk(est, audit)
    w.exact.update(zip(audit, np.asarray(exact(audit), float).tolist()))
    if len(audit) == n:
        return w
    w.q = conformal_offset([w.exact[i] - est[i] for i in audit], plan.level)
    pending = [int(i) for i in np.argsort(-est, kind="stable") if int(i) not in w.exact]
    top, pos = min(plan.top, n), 0
    while pos < len(pending):
        done = sorted(w.exact.values(), reverse=True)
        cutoff = done[top - 1] if len(done) >= top else -np.inf
        batch = []
        while pos < len(pending) and len(batch) < plan.batch and est[pending[pos]] + w.q >= cutoff:
            batch.append(pending[pos])
            pos += 1
        if not batch:
            break
        w.exact.update(zip(batch, np.asarray(exact(batch), float).tolist()))
    return w


def _estimated(task, unit_rows: list[Unit], like: pl.DataFrame, drop: np.ndarray, floor: float) -> pl.DataFrame:
    """Rows of the units not scored exactly, with `like`'s columns: drop = the estimate (and the
    ablated metric and damage it implies); values the same for every row (the clean metric, its
    span) copied; intervals and the other metrics missing."""
    name, hib = task.metric_name, task.higher_is_better
    clean = float(like[f"{name}_clean"][0])
    ablated = clean - drop if hib else clean + drop
    known = {"layer": [u.layer for u in unit_rows], "head": [u.head for u in unit_rows],
             "unit": [u.label for u in unit_rows], "heads": [list(u.heads) for u in unit_rows],
             f"{name}_ablated": ablated, "drop": drop,
             "damage": np.asarray(metrics.damage(clean, ablated, floor, hib), float)}
    same = {c for c in like.columns if c.endswith("_clean") or c.startswith("clean_span")}
    cols = {}
    for c, dtype in like.schema.items():
        if c in known:
            cols[c] = pl.Series(c, known[c], dtype=dtype)
        elif c in same:
            cols[c] = pl.Series(c, [like[c][0]] * len(unit_rows), dtype=dtype)
        else:
            cols[c] = pl.Series(c, [None] * len(unit_rows), dtype=dtype)
            if dtype.is_float():
                cols[c] = cols[c].fill_null(float("nan"))
    return pl.DataFrame(cols)


def guided_scores(probe: Probe, unit_rows: list[Unit], floor, plan: ScoreSettings, seed: int,
                  bootstrap: Bootstrap | None = None) -> tuple[pl.DataFrame, pl.DataFrame, Walk]:
    """As `ablation.score_units`, by the guided scan: (scores with `estimated` and `drop_bound`,
    the per-prompt metric of the clean run and of the units scored exactly, the `Walk`). The rows
    scored exactly are `score_units`' rows for those units (top_freq: among them)."""
    task, name = probe.task, probe.task.metric_name
    clean_run = probe.run([{}], extra=True)
    clean = float(clean_run[name][0].numpy().mean())
    held: dict[int, dict] = {}

    def exact(idx):
        res = probe.run([as_sets([unit_rows[i]]) for i in idx], extra=True)
        held.update((i, {k: v[j] for k, v in res.items()}) for j, i in enumerate(idx))
        return metrics.drop(clean, res[name].numpy().mean(axis=1), task.higher_is_better)

    w = walk(estimated_drops(probe, unit_rows), exact, plan, np.random.default_rng(seed))
    scored = w.scored
    res = {k: torch.stack([clean_run[k][0]] + [held[i][k] for i in scored]) for k in clean_run}
    df, per_prompt = score_table(task, [unit_rows[i] for i in scored], res, floor, bootstrap)
    df = df.with_columns(estimated=pl.lit(False), drop_bound=pl.lit(float("nan"), pl.Float64))
    rest = [i for i in range(len(unit_rows)) if i not in w.exact]
    if rest:
        est = _estimated(task, [unit_rows[i] for i in rest], df.drop("estimated", "drop_bound"), w.est[rest],
                         split_floor(floor)[1])
        est = est.with_columns(estimated=pl.lit(True), drop_bound=pl.Series(w.bound()[rest], dtype=pl.Float64))
        position = {u.label: i for i, u in enumerate(unit_rows)}
        df = pl.concat([df, est]).sort(pl.col("unit").replace_strict(position, return_dtype=pl.Int64))
    top = metrics.top(df)
    assert not top["estimated"], f"guided scan: the top unit {top['unit']} was not scored exactly"
    return df, per_prompt, w


def summary(w: Walk, unit_rows: list[Unit], n_layers: int, plan: ScoreSettings) -> str:
    """The job log's line: units, audited, scored exactly, q, level, forward passes saved
    (approximate: a unit's exact run resumes at its layer, so it costs (L - layer) / L of a
    forward; attribution costs about 2: one forward, and one backward to the head outputs alone)."""
    skipped = [u for i, u in enumerate(unit_rows) if i not in w.exact]
    saved = sum((n_layers - u.layer) / n_layers for u in skipped) - 2
    return (f"guided scan: {len(unit_rows)} units, {len(w.audit)} audited, {len(w.exact)} scored exactly, "
            f"q {w.q:.4g} at level {plan.level:g} (top {plan.top}), about {saved:.1f} forward passes saved "
            "against the exact scan")
