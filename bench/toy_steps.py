"""At which step each sweep toy first passes its held-out checks: whether a cheaper recipe (fewer
steps) would keep the toys.

    python bench/toy_steps.py --seeds 3-8 --steps 700     # the 30 toys of seeds 3..8, checks every 100 steps
    python bench/toy_steps.py --models sweep_small_kv1_s0 --steps 900 --every 100

The recipe's learning rate is constant after its warm-up, so a recipe of N steps trains the same
toy as the first N steps of a longer one: the checks after N steps are that recipe's checks. Each
toy trains in its own pinned process (as the workflow's training job does: `kernels.pin` before
torch); one line a toy, then how many toys pass at each checked step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
VARIANTS = ("small_kv8", "small_kv1", "dh32_kv2", "dh32_kv1", "dh32pm_kv1")


def worker(config: str, model: str, steps: int, every: int) -> None:
    """Train one toy (pinned) and print {step: passed} as JSON."""
    from circuitloc import kernels

    kernels.pin()
    import torch
    from toy_digests import spec_of

    from circuitloc.models.toy.evaluation import verdict
    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import fit, prepare

    s = resolve_spec({**spec_of(config, model, steps), "eval_every": every, "log_every": every})
    torch.set_num_threads(1)
    with kernels.deterministic():
        run = prepare(s)
        hist, _ = fit(run, lambda m: None)
        final = run.evaluator(run.model)
    checked = {h["step"]: h for h in hist if "ioi_acc" in h}
    checked[steps] = final
    print(json.dumps({step: verdict(m, s["acceptance"]).passed for step, m in sorted(checked.items())}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/sweep_capacity.yaml")
    ap.add_argument("--seeds", default="3-8", help="a..b: the sweep's five toys of each seed")
    ap.add_argument("--models", default="", help="comma-separated model names instead of --seeds")
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--worker", nargs=1, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.config, a.worker[0], a.steps, a.every)
    if a.models:
        models = a.models.split(",")
    else:
        lo, hi = (int(x) for x in a.seeds.split("-"))
        models = [f"sweep_{v}_s{s}" for s in range(lo, hi + 1) for v in VARIANTS]
    passes: dict[int, int] = {}
    for m in models:
        out = subprocess.run([sys.executable, __file__, "--config", a.config, "--steps", str(a.steps),
                              "--every", str(a.every), "--worker", m], capture_output=True, text=True, check=True,
                             cwd=ROOT).stdout.strip().splitlines()[-1]
        steps = {int(k): v for k, v in json.loads(out).items()}
        first = min((k for k, v in steps.items() if v), default=None)
        print(f"{m:24s} first passes at step {first if first is not None else '-'}", flush=True)
        for k, v in steps.items():
            passes[k] = passes.get(k, 0) + int(v)
    print("toys passing their held-out checks after N steps:")
    for k in sorted(passes):
        print(f"  {k:5d} steps: {passes[k]} of {len(models)}")


if __name__ == "__main__":
    main()
