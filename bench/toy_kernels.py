"""Whether a toy trains to the same bits under other CPU kernel paths: the same toy, the same steps,
each in a fresh process under one setting of the kernel environment, its weights compared bit for
bit with the first setting's (and, where they differ, how far apart they end).

    python bench/toy_kernels.py                                   # sweep_small_kv1_s0, 200 steps
    python bench/toy_kernels.py --model sweep_dh32_kv1_s0 --steps 300

Torch picks its kernels when a process starts: ATen's vectorised paths by ATEN_CPU_CAPABILITY
(default: the widest the CPU has), MKL's matmul code path by MKL_CBWR (default: the CPU's),
oneDNN's by ONEDNN_MAX_CPU_ISA. Each setting below caps one of them, as a CPU without the wider
instructions would; `pinned` is what a toy's training job sets (circuitloc.models.toy.kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SETTINGS = {
    "host": {},  # whatever this CPU offers
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl_compatible": {"MKL_CBWR": "COMPATIBLE"},
    "onednn_sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    "two_threads": {"CIRCUITLOC_BENCH_THREADS": "2"},
    "unpinned": {"CIRCUITLOC_KERNELS": "host"},  # the host's kernels even in a pinned run
}
# MKL's branches, each on ATen's AVX2 path, training unpinned (--settings mkl_branches): on a CPU that
# is not Intel's, MKL honours COMPATIBLE only and runs every other branch as AUTO (its documentation
# says so; this shows it on the machine at hand: identical weights mean the same branch ran)
MKL_BRANCHES = {f"mkl_{b.lower()}": {"CIRCUITLOC_KERNELS": "host", "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": b}
                for b in ("AUTO", "AVX2", "AVX512", "SSE4_2", "COMPATIBLE")}
SETTINGS.update(MKL_BRANCHES)


def worker(model: str, config: str, steps: int, out: Path) -> None:
    """Train `model` for `steps` steps in this process (its environment as the parent set it) and
    write its weights to `out` (safetensors) and the loop's seconds beside them."""
    from circuitloc import kernels

    kernels.pin()  # before torch: a no-op under CIRCUITLOC_KERNELS=host (--unpinned)
    import torch
    from safetensors.torch import save_file

    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import fit, prepare
    from circuitloc.plan.config.workflow_config import layered, resolve

    models = resolve(layered(ROOT, {}, [config]), ROOT)["models"]
    s = resolve_spec({**models[model]["toy"], "steps": steps, "log_every": 0, "eval_every": 0})
    torch.set_num_threads(int(os.environ.get("CIRCUITLOC_BENCH_THREADS", "1")))
    with kernels.deterministic():
        run = prepare(s)
        _, seconds = fit(run, lambda m: None)
    save_file({k: v.clone() for k, v in run.model.state_dict().items() if k != "lm_head.weight"}, str(out))  # tied
    out.with_suffix(".json").write_text(json.dumps({"seconds": seconds, "aten": torch.backends.cpu.get_cpu_capability()}))


def compare(a: Path, b: Path) -> dict:
    """Bit-identical or not, the largest absolute weight difference and the largest relative to the
    tensor's own scale."""
    import torch
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    same = x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    diff = max(float((x[k] - y[k]).abs().max()) for k in x)
    rel = max(float((x[k] - y[k]).norm() / x[k].norm().clamp_min(1e-12)) for k in x)
    return {"identical": same, "max_abs": diff, "max_rel_norm": rel}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "config/sweep_capacity.yaml"))
    ap.add_argument("--model", default="sweep_small_kv1_s0")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names of SETTINGS, or mkl_branches (MKL's branches side by side)")
    ap.add_argument("--unpinned", action="store_true", help="train without the job's pinning (kernels.pin)")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.model, a.config, a.steps, a.worker)
    import torch

    names = list(MKL_BRANCHES) if a.settings == "mkl_branches" else a.settings.split(",")
    print(f"toy {a.model} ({a.config}), {a.steps} steps, torch {torch.__version__}, host ATen capability "
          f"{torch.backends.cpu.get_cpu_capability()}, training {'unpinned' if a.unpinned else 'pinned'}")
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for name in names:
            env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR",
                                                                      "ONEDNN_MAX_CPU_ISA")}
            env["CIRCUITLOC_KERNELS"] = "host" if a.unpinned else ""
            env.update(SETTINGS[name])
            outs[name] = Path(tmp) / f"{name}.safetensors"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--config", a.config, "--model", a.model, "--steps",
                            str(a.steps), "--worker", str(outs[name])], env=env, check=True)
            info = json.loads(outs[name].with_suffix(".json").read_text())
            r = compare(outs[names[0]], outs[name])
            print(f"{name:15s} {json.dumps(SETTINGS[name]):40s} ATen {info['aten']:8s} loop {info['seconds']:6.1f} s "
                  f"(process {time.perf_counter() - t0:5.1f} s)  vs {names[0]}: "
                  + ("bit-identical" if r["identical"] else
                     f"DIFFERENT, max |dw| {r['max_abs']:.2e}, max ||dw||/||w|| {r['max_rel_norm']:.2e}"))


if __name__ == "__main__":
    main()
