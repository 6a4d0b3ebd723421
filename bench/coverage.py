"""How often the intervals over prompts cover the truth: synthetic prompts of
known truth, the same resampling as the score and curve jobs (`stats.bootstrap_weights`), three
ways to read an interval off the resamples: percentile (what the jobs used to do), BCa and
studentized (bootstrap-t, what `stats.INTERVAL` now makes them do). The damage interval that
ships (studentized or Fieller's, by the span's noise) is measured case by case by
bench/coverage_regimes.py.

    python bench/coverage.py                    # 1000 datasets per cell, 1000 resamples each
    python bench/coverage.py --reps 300 --n 20  # quicker

Quantities (each a mean over prompts, or a ratio of two, as the jobs compute them):
  drop    a unit's drop, mean over prompts of clean - ablated
  damage  drop / (clean - floor), numerator and denominator from the same prompts
  curve   the damage of each of 5 cumulative ablation steps (coverage averaged over the steps)
Per-prompt distributions of the drop (the noise around each prompt's mean):
  normal  N(0, 1)
  skewed  exponential (skewness 2): most prompts barely move, a few a lot
  heavy   lognormal(0, 1) (skewness 6): a handful of prompts carry the drop
  t3      Student's t with 3 degrees of freedom: symmetric, a few prompts far out on either side
The last lines: the top unit chosen on the scoring prompts, its interval from those same prompts
(in-sample) and from held-out prompts, against the chosen unit's true drop.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from circuitloc import stats  # noqa: E402  (after the path insert)

PROMPTS = (10, 20, 60, 180)  # the shipped prompt counts: ioi n_score 20, facts 60, ioi curves 180
DISTS = ("normal", "skewed", "heavy", "t3")
QUANTITIES = ("drop", "damage", "curve")
CURVE_DAMAGE = np.array([0.2, 0.4, 0.6, 0.8, 0.95])  # the true damage of each curve step
SPAN = (4.0, 1.0)  # clean - floor per prompt: mean and sd (a metric well above its floor)


@dataclass(frozen=True)
class Case:
    """One cell of the benchmark: which quantity, which per-prompt noise, how many prompts."""

    quantity: str = "drop"
    dist: str = "normal"
    n: int = 20


def noise(rng, dist: str, shape) -> np.ndarray:
    """Mean-zero, variance-one per-prompt noise of the given shape."""
    if dist == "normal":
        return rng.normal(0.0, 1.0, shape)
    if dist == "skewed":
        return rng.exponential(1.0, shape) - 1.0
    if dist == "heavy":
        s2 = 1.0  # lognormal(0, 1): mean e^0.5, variance (e - 1) e
        return (rng.lognormal(0.0, 1.0, shape) - np.exp(s2 / 2)) / np.sqrt((np.exp(s2) - 1) * np.exp(s2))
    if dist == "t3":  # Student's t, 3 degrees of freedom (variance 3): symmetric, heavy tails both ways
        return rng.standard_t(3, shape) / np.sqrt(3.0)
    raise ValueError(f"unknown distribution {dist!r}: expected one of {', '.join(DISTS)}")


def dataset(rng, case: Case):
    """(numerators [U, N], denominator [N] or None, truth [U]) of one synthetic set of prompts."""
    if case.quantity == "drop":
        return 1.0 + noise(rng, case.dist, (1, case.n)), None, np.array([1.0])
    span = rng.normal(*SPAN, case.n)
    r = CURVE_DAMAGE if case.quantity == "curve" else CURVE_DAMAGE[[1]]
    # each step's drop: its damage times the prompt's span, plus noise (mean 0: the truth stays r)
    return r[:, None] * span[None, :] + noise(rng, case.dist, (len(r), case.n)), span, r


def covers(case: Case, method: str, reps: int, n_boot: int = 1000, seed: int = 0) -> float:
    """Share of `reps` synthetic datasets (and of a curve's steps) whose interval holds the truth."""
    rng = np.random.default_rng(seed)
    hits = total = 0
    for _ in range(reps):
        num, den, truth = dataset(rng, case)
        w = stats.bootstrap_weights(case.n, n_boot, int(rng.integers(2 ** 31)))
        lo, hi = (stats.mean_intervals(num, w, 0.95, method) if den is None
                  else stats.ratio_intervals(num, den, w, 0.95, method))
        hits += int(np.sum((lo <= truth) & (truth <= hi)))
        total += len(truth)
    return hits / total


def top_unit_coverage(n: int, reps: int, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """(in-sample, held-out) coverage of the top unit's drop: 16 units whose true drops are close
    (1.0 to 1.3), the top one chosen on n scoring prompts; its interval from those prompts, and
    from n other prompts, against its true drop."""
    rng = np.random.default_rng(seed)
    truth = np.linspace(1.0, 1.3, 16)
    inside = held = 0
    for _ in range(reps):
        score = truth[:, None] + noise(rng, "normal", (16, n))
        top = int(np.argmax(score.mean(axis=1)))
        w = stats.bootstrap_weights(n, n_boot, int(rng.integers(2 ** 31)))
        lo, hi = stats.mean_intervals(score[[top]], w, 0.95)
        inside += int(lo[0] <= truth[top] <= hi[0])
        other = truth[top] + noise(rng, "normal", (1, n))
        lo, hi = stats.mean_intervals(other, w, 0.95)
        held += int(lo[0] <= truth[top] <= hi[0])
    return inside / reps, held / reps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=1000, help="synthetic datasets per cell")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples per dataset")
    p.add_argument("--n", type=int, nargs="*", default=list(PROMPTS), help="prompt counts")
    p.add_argument("--quantities", nargs="*", default=list(QUANTITIES))
    p.add_argument("--dists", nargs="*", default=list(DISTS))
    a = p.parse_args(argv)
    start = time.time()
    se = np.sqrt(0.95 * 0.05 / a.reps)
    print(f"coverage of nominal 95% intervals, {a.reps} datasets x {a.boot} resamples per cell "
          f"(Monte Carlo se ~{se:.3f} for a drop; a curve averages 5 correlated steps)")
    print(f"{'quantity':8s} {'dist':7s} {'n':>4s}  " + "  ".join(f"{m:>11s}" for m in stats.INTERVAL_METHODS))
    for q in a.quantities:
        for dist in a.dists:
            for n in a.n:
                case = Case(q, dist, n)
                row = [covers(case, m, a.reps, a.boot, seed=n) for m in stats.INTERVAL_METHODS]
                print(f"{q:8s} {dist:7s} {n:4d}  " + "  ".join(f"{c:11.3f}" for c in row), flush=True)
    print("top unit chosen on the scoring prompts (16 units, true drops 1.0-1.3, normal noise), "
          f"{stats.INTERVAL} intervals:")
    for n in a.n:
        inside, held = top_unit_coverage(n, a.reps, a.boot, seed=n)
        print(f"  n {n:4d}: in-sample {inside:.3f}, held out {held:.3f}", flush=True)
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
