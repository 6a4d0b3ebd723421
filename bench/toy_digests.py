"""The sha256 of pinned toy trainings, against the digests stored in the repository.

    python bench/toy_digests.py            # train every case, compare with tests/models/toy_digests.json
    python bench/toy_digests.py --short    # only the short trainings (150 and 60 steps)
    python bench/toy_digests.py --default  # the default config's two toys, whole (minutes each)
    python bench/toy_digests.py --write    # store this machine's digests (a new recipe or torch version)

A pinned toy (`kernels: pinned`, circuitloc.kernels) must train to the same bits on every x86-64 CPU
with AVX2: the digests were written on one machine and every machine that runs this (the test
tests/models/test_toy_digests.py does, in CI) checks them. Each case trains in a fresh process,
pinned before torch is imported, as the workflow's training job does. The digest is the one the
model card records (`weights.sha256`: one sha256 over the weight files' sizes and sha256s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "models" / "toy_digests.json"
# (case, config file, model, steps: None for the recipe's own)
CASES = [
    ("sweep_small_kv1_s0_150", "config/sweep_capacity.yaml", "sweep_small_kv1_s0", 150),
    ("toy_gqa_60", "config/config.yaml", "toy_gqa", 60),
    ("sweep_dh32_kv1_s0_full", "config/sweep_capacity.yaml", "sweep_dh32_kv1_s0", None),
]
SHORT = [c for c in CASES if c[3] is not None]
# the default config's two toys as its run trains them (their cards' weights.sha256), checked by
# --default rather than by the test suite (a few minutes each on one core)
DEFAULT_TOYS = [("toy_mha_full", "config/config.yaml", "toy_mha", None),
                ("toy_gqa_full", "config/config.yaml", "toy_gqa", None)]


def spec_of(config: str, model: str, steps: int | None) -> dict:
    """The toy block of `model` in `config` (layered on the default, as a run resolves it), with
    `steps` steps, no logs and checks that never refuse (a short training fails them)."""
    sys.path.insert(0, str(ROOT / "src"))
    from circuitloc.plan.config.workflow_config import layered, resolve

    toy = dict(resolve(layered(ROOT, {}, [str(ROOT / config)]), ROOT)["models"][model]["toy"])
    if steps is not None:
        toy["steps"] = steps
    toy["log_every"] = 0
    toy["acceptance"] = {**toy.get("acceptance", {}), "enforce": False}
    if toy.get("kernels") != "pinned":
        raise SystemExit(f"{config}: {model} is not a pinned toy (kernels: {toy.get('kernels')!r})")
    return toy


def worker(spec_json: str, out: str) -> None:
    """Train the toy `spec_json` describes into `out` in this process, pinned first; print its digest."""
    from circuitloc import kernels

    kernels.pin()
    from circuitloc.models.card import weights_record
    from circuitloc.models.toy import train_toy

    result = train_toy(json.loads(spec_json), out, log=lambda m: None)
    print(json.dumps({"sha256": weights_record(out)["sha256"], "checks": result["checks"]}))


def digest(config: str, model: str, steps: int | None, checks: dict | None = None) -> str:
    """The weights digest of a fresh pinned training of `model` (a subprocess: torch reads the kernel
    switches when it starts); its held-out checks into `checks`, when given."""
    spec = spec_of(config, model, steps)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec), str(Path(tmp) / "toy")],
                             capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            raise RuntimeError(f"training {model} failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if checks is not None:
            checks.update(r["checks"])
        return r["sha256"]


def stored() -> dict:
    return json.loads(STORE.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="only the short cases")
    ap.add_argument("--default", action="store_true", help="the default config's two toys instead")
    ap.add_argument("--write", action="store_true", help=f"store this machine's digests in {STORE.relative_to(ROOT)}")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(*a.worker)
        return 0
    import torch

    ref = stored() if STORE.is_file() else {"digests": {}}
    got, bad = {}, 0
    for case, config, model, steps in DEFAULT_TOYS if a.default else SHORT if a.short else CASES:
        t0 = time.perf_counter()
        checks: dict = {}
        got[case] = digest(config, model, steps, checks)
        want = ref["digests"].get(case)
        same = "stored" if a.write else ("equal" if got[case] == want else f"DIFFERENT (stored {want})")
        same += "" if steps is not None else f", held-out checks {'passed' if checks.get('passed') else 'FAILED'}"
        bad += not a.write and got[case] != want
        print(f"{case:26s} {got[case]}  {same}  ({time.perf_counter() - t0:.0f} s)")
    if a.write:
        ref["torch"] = torch.__version__.split("+")[0]
        ref["digests"] = {**ref["digests"], **got}
        STORE.write_text(json.dumps(ref, indent=2, sort_keys=True) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
