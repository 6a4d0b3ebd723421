"""Where a toy's training job spends its time: starting the interpreter and importing torch,
building the vocabulary, data stream and held-out sets, the optimiser steps, the held-out checks
and writing the weights, each timed in one fresh pinned process (as the workflow's job runs it).

    python bench/toy_cost.py                                  # sweep_small_kv1_s0, 100 timed steps
    python bench/toy_cost.py --model sweep_dh32_kv1_s0 --steps 60

Two variants side by side, each in its own process: `packed` (the recipe's default: a batch's rows
share sequences, corpus.pack) and `padded` (one padded row each, `pack: false`). The steps are timed
on `--steps` and scaled to the recipe's own count, so the last lines estimate the whole toy; run it
on an idle machine for numbers to quote.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(config: str, model: str, steps: int, packed: bool) -> dict:
    t0 = time.perf_counter()
    from circuitloc import kernels

    kernels.pin()
    import tempfile

    import torch

    from circuitloc.models.toy.evaluation import verdict
    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import _save, fit, prepare

    sys.path.insert(0, str(ROOT / "bench"))
    from toy_digests import spec_of

    t_import = time.perf_counter()
    spec = spec_of(config, model, None)
    full = int(resolve_spec(spec)["steps"])
    s = resolve_spec({**spec, "steps": steps, "pack": packed})
    torch.set_num_threads(1)
    with kernels.deterministic():
        t1 = time.perf_counter()
        run = prepare(s)
        t2 = time.perf_counter()
        _, loop = fit(run, lambda m: None)
        t3 = time.perf_counter()
        v = verdict(run.evaluator(run.model), s["acceptance"])
        t4 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            _save(run, Path(tmp) / "toy", {"checks": v.checks}, [])
        t5 = time.perf_counter()
    return {"import": t_import - t0, "config": t1 - t_import, "prepare": t2 - t1, "step": loop / steps,
            "steps": full, "checks": t4 - t3, "save": t5 - t4}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/sweep_capacity.yaml")
    ap.add_argument("--model", default="sweep_small_kv1_s0")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--packed", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.config, a.model, a.steps, a.packed)))
        return
    results = {}
    for name in ("packed", "padded"):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--worker", "--config", a.config, "--model", a.model,
                              "--steps", str(a.steps)] + (["--packed"] if name == "packed" else []),
                             capture_output=True, text=True, check=True, cwd=ROOT)
        process = time.perf_counter() - t0
        r = json.loads(out.stdout.strip().splitlines()[-1])
        start = process - (r["import"] + r["config"] + r["prepare"] + r["step"] * a.steps + r["checks"] + r["save"])
        results[name] = [("interpreter start-up and exit", start), ("imports (torch, transformers, circuitloc)",
                         r["import"]), ("config resolved", r["config"]),
                         ("vocabulary, data stream, held-out sets", r["prepare"]),
                         (f"{r['steps']} optimiser steps (timed on {a.steps})", r["step"] * r["steps"]),
                         ("held-out checks", r["checks"]), ("weights written", r["save"])]
    print(f"{a.model} ({a.config}), pinned, one thread; seconds (share of the whole toy)")
    print(f"  {'':48s} {'packed':>15s} {'padded':>15s} {'padded/packed':>14s}")
    whole = {k: sum(sec for _, sec in v) for k, v in results.items()}
    for i, (name, _) in enumerate(results["packed"]):
        p, q = results["packed"][i][1], results["padded"][i][1]
        print(f"  {name:48s} {p:7.1f} ({100 * p / whole['packed']:4.1f}%) {q:7.1f} ({100 * q / whole['padded']:4.1f}%) "
              f"{q / p if p > 0 else float('nan'):13.2f}x")
    print(f"  {'the whole toy (estimated)':48s} {whole['packed']:15.1f} {whole['padded']:15.1f} "
          f"{whole['padded'] / whole['packed']:13.2f}x")
    print(f"  {'toys a minute a core':48s} {60 / whole['packed']:15.2f} {60 / whole['padded']:15.2f}")


if __name__ == "__main__":
    main()
