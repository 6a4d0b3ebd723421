"""Does a pinned toy train the same bits on another CPU maker? Op by op, under an emulated CPU.

    python bench/toy_vml.py                           # native vs an emulated AMD EPYC, 2 steps of toy_gqa
    python bench/toy_vml.py --cpu Haswell-v4 --steps 3
    python bench/toy_vml.py --model sweep_small_kv1_s0 --config config/sweep_capacity.yaml

Runs the first `--steps` training steps of a pinned toy (circuitloc.kernels.pin, the training job's
own code) twice: on this CPU, and under QEMU's user-mode emulator (`qemu-x86_64 -cpu CPU`, Debian's
qemu-user) with another CPU's identity: another maker, cache sizes and feature flags, so that every
library that dispatches on the CPU (MKL, oneDNN, ATen) takes the path it would take there. Each op's
outputs are hashed at torch's dispatcher, and the two traces are compared line by line: the first
op whose inputs agree and whose outputs differ is a CPU-dependent kernel.

QEMU computes an approximate instruction (rcpps, rsqrtps) exactly where real CPUs each round their
own way, and real CPUs agree with each other and with QEMU on every exactly rounded instruction; so
a kernel that uses approximate instructions shows here, and a trace that agrees used none that
mattered. This is how MKL's vector math (torch's sqrt, cos, sin) was found to set the last bit by
the CPU (circuitloc.models.toy.exact). Emulation is slow: about 5 minutes for 2 steps of toy_gqa.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def trace(spec: dict, steps: int, out: Path) -> None:
    """Train `steps` steps of `spec` in this process, pinned first; one line per dispatched op."""
    sys.path.insert(0, str(ROOT / "src"))
    from circuitloc import kernels

    kernels.pin()
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import fit, prepare

    def digest(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().contiguous().reshape(-1)
            raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
            return f"{hashlib.sha256(raw).hexdigest()[:16]}:{str(t.dtype)[6:]}{tuple(x.shape)}"
        if isinstance(x, (list, tuple)):
            return "[" + ",".join(digest(y) for y in x) + "]"
        return "-"

    lines = []

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            r = func(*args, **(kwargs or {}))
            ins = [a for a in args if isinstance(a, torch.Tensor)]
            lines.append(f"{func}\t{digest(r)}\t{digest(ins)}")
            return r

    torch.set_num_threads(1)
    s = resolve_spec({**spec, "steps": steps, "log_every": 0, "eval_every": 0})
    with kernels.deterministic():
        run = prepare(s)
        lines.append(f"init\t{digest(list(run.model.state_dict().values()))}\t-")
        with Trace():
            fit(run, lambda m: None)  # the training job's own loop
        lines.append(f"weights\t{digest(list(run.model.state_dict().values()))}\t-")
    out.write_text("\n".join(lines) + "\n")


def compare(a: list[str], b: list[str]) -> dict:
    """The traces side by side: ops, ops whose outputs differ (and how many of them in float32), the
    first op that differs on equal inputs (a CPU-dependent kernel), and whether the weights after
    the steps are equal."""
    rows = [(x.split("\t"), y.split("\t")) for x, y in zip(a, b)]
    differ = [i for i, (x, y) in enumerate(rows) if x[:2] != y[:2]]  # another op, or other outputs
    culprit = next((i for i in differ if rows[i][0][0] == rows[i][1][0] and rows[i][0][2] == rows[i][1][2]), None)
    return {"ops": len(a), "same_length": len(a) == len(b), "differing": len(differ),
            "differing_float32": sum("float32" in rows[i][0][1] for i in differ),
            "culprit": rows[culprit][0][0] if culprit is not None else None,
            "culprit_line": culprit, "weights_equal": a[-1] == b[-1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="toy_gqa")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--cpu", default="EPYC-Milan-v1", help="QEMU's CPU model (qemu-x86_64 -cpu help lists them)")
    ap.add_argument("--keep", type=Path, help="keep both traces in this folder")
    ap.add_argument("--trace", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.trace:
        trace(json.loads(a.trace[0]), a.steps, Path(a.trace[1]))
        return 0
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise SystemExit("toy_vml: needs qemu-x86_64 (Debian: apt-get install qemu-user)")
    sys.path.insert(0, str(ROOT / "bench"))
    import toy_digests

    spec = toy_digests.spec_of(a.config, a.model, a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.keep or tmp)
        out.mkdir(parents=True, exist_ok=True)
        traces = {}
        for name, prefix in (("native", []), (a.cpu, [qemu, "-cpu", a.cpu])):
            t0 = time.perf_counter()
            path = out / f"trace_{name}.txt"
            subprocess.run(prefix + [sys.executable, __file__, "--steps", str(a.steps), "--trace", json.dumps(spec),
                                     str(path)], check=True, stderr=subprocess.DEVNULL)
            traces[name] = path.read_text().splitlines()
            print(f"{name:16s} {len(traces[name])} ops traced in {time.perf_counter() - t0:.0f} s")
    r = compare(traces["native"], traces[a.cpu])
    print(f"{a.model} ({a.config}), {a.steps} pinned steps, this CPU vs emulated {a.cpu}: {r['ops']} ops, "
          f"{r['differing']} with other outputs, {r['differing_float32']} of them float32; first op to differ on "
          f"equal inputs: {r['culprit'] or 'none'}; weights after the steps "
          f"{'EQUAL' if r['weights_equal'] else 'DIFFERENT'}")
    if r["differing"] and not r["differing_float32"]:
        print("  only float64 intermediates differ (the exact square root's), and they round to the same float32")
    return 0 if r["weights_equal"] and not r["differing_float32"] else 1


if __name__ == "__main__":
    sys.exit(main())
