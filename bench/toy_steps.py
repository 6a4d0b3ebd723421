"""At which step each sweep toy first passes its held-out checks: whether a cheaper recipe (fewer
steps, or a smaller batch) would keep the toys, and what a toy's training costs.

    python bench/toy_steps.py --seeds 3-8 --steps 700     # the 30 toys of seeds 3..8, checks every 100 steps
    python bench/toy_steps.py --models sweep_small_kv1_s0 --steps 900 --every 100
    python bench/toy_steps.py --seeds 3-8 --steps 900 --batch 32   # the recipe with another batch (--lr too)

The recipe's learning rate is constant after its warm-up, so a recipe of N steps trains the same
toy as the first N steps of a longer one: the checks after N steps are that recipe's checks. Each
toy trains in its own pinned process (as the workflow's training job does: `kernels.pin` before
torch); one line a toy (the step it first passes, its batch, the seconds of its optimiser steps
without the checks, and of its whole process), then how many toys pass at each checked step and
the mean seconds a toy. `--batch` and `--lr` override those keys of the recipe for every toy and
keep the rest the sweep's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
VARIANTS = ("small_kv8", "small_kv1", "dh32_kv2", "dh32_kv1", "dh32pm_kv1")


def worker(config: str, model: str, steps: int, every: int, override: dict) -> None:
    """Train one toy (pinned), the recipe's keys in `override` replaced, and print as JSON
    {passed: {step: passed}, batch, lr, rows (a batch's rows per task), seconds (the optimiser
    steps, the checks during training left out)}."""
    from circuitloc import kernels

    kernels.pin()
    import torch
    from toy_digests import spec_of

    from circuitloc.models.toy.evaluation import verdict
    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import fit, prepare

    s = resolve_spec({**spec_of(config, model, steps), **override, "eval_every": every, "log_every": every})
    torch.set_num_threads(1)
    in_checks = [0.0]

    def timed(evaluate):
        def checks(m):
            t0 = time.perf_counter()
            try:
                return evaluate(m)
            finally:
                in_checks[0] += time.perf_counter() - t0
        return checks

    with kernels.deterministic():
        run = prepare(s)
        run = dataclasses.replace(run, evaluator=timed(run.evaluator))
        hist, seconds = fit(run, lambda m: None)
        seconds -= in_checks[0]
        final = run.evaluator(run.model)
    checked = {h["step"]: h for h in hist if "ioi_acc" in h}
    checked[steps] = final
    print(json.dumps({"passed": {step: verdict(m, s["acceptance"]).passed for step, m in sorted(checked.items())},
                      "batch": int(s["batch"]), "lr": float(s["lr"]), "rows": run.corpus.n, "seconds": seconds}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/sweep_capacity.yaml")
    ap.add_argument("--seeds", default="3-8", help="a..b: the sweep's five toys of each seed")
    ap.add_argument("--models", default="", help="comma-separated model names instead of --seeds")
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch", type=int, help="rows a batch, instead of the recipe's")
    ap.add_argument("--lr", type=float, help="learning rate after the warm-up, instead of the recipe's")
    ap.add_argument("--worker", nargs=1, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    override = {k: v for k, v in (("batch", a.batch), ("lr", a.lr)) if v is not None}
    if a.worker:
        return worker(a.config, a.worker[0], a.steps, a.every, override)
    if a.models:
        models = a.models.split(",")
    else:
        lo, hi = (int(x) for x in a.seeds.split("-"))
        models = [f"sweep_{v}_s{s}" for s in range(lo, hi + 1) for v in VARIANTS]
    passes: dict[int, int] = {}
    fit_s, job_s = [], []
    extra = [f"--{k}={v}" for k, v in override.items()]
    for m in models:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--config", a.config, "--steps", str(a.steps),
                              "--every", str(a.every), *extra, "--worker", m], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout.strip().splitlines()[-1]
        job_s.append(time.perf_counter() - t0)
        r = json.loads(out)
        steps = {int(k): v for k, v in r["passed"].items()}
        fit_s.append(r["seconds"])
        first = min((k for k, v in steps.items() if v), default=None)
        print(f"{m:24s} first passes at step {first if first is not None else '-'}  batch {r['batch']} "
              f"{r['rows']} lr {r['lr']:g}  steps {fit_s[-1]:.1f} s, process {job_s[-1]:.1f} s", flush=True)
        for k, v in steps.items():
            passes[k] = passes.get(k, 0) + int(v)
    print("toys passing their held-out checks after N steps:")
    for k in sorted(passes):
        print(f"  {k:5d} steps: {passes[k]} of {len(models)}")
    print(f"mean seconds a toy: {a.steps} optimiser steps {sum(fit_s) / len(fit_s):.1f} s (the checks left out), "
          f"its process {sum(job_s) / len(job_s):.1f} s (with {a.steps // a.every if a.every else 0} checks)")


if __name__ == "__main__":
    main()
