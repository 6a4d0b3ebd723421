"""A table or figure job's start-up: what its script imports and sets up before it reads anything,
for this checkout's src/ and another's (`--other DIR`, e.g. a clone of an older commit), in fresh
interpreters, side by side with the ratio. Not a test: it prints numbers.

    .venv/bin/python bench/light_jobs.py --other /tmp/old_clone [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what workflow/scripts/tables.py and figures.py do before reading their inputs
JOB = ("import sys; sys.path.insert(0, {src!r})\n"
       "from circuitloc.runner import setup; setup()\n"
       "import circuitloc.report.tables.writers, circuitloc.report.figures.draw, circuitloc.report.tables.localization\n"
       "print('torch' in sys.modules)")


def start_up(src: Path, runs: int) -> tuple[list[float], bool]:
    times, torch = [], None
    for _ in range(runs + 1):  # the first is a warm-up (file cache)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", JOB.format(src=str(src))], capture_output=True, text=True,
                             check=True)
        times.append(time.perf_counter() - t0)
        torch = out.stdout.strip() == "True"
    return times[1:], torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--other", type=Path, required=True, help="another checkout (its src/ is timed beside this one)")
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    rows = {}
    for name, root in (("this", ROOT), ("other", a.other)):
        times, torch = start_up(root / "src", a.runs)
        rows[name] = statistics.median(times)
        print(f"{name:6s} {root}: median {rows[name]:.2f} s (min {min(times):.2f}, max {max(times):.2f}) "
              f"over {a.runs} runs; imports torch: {torch}")
    print(f"start-up, other / this: {rows['other'] / rows['this']:.1f}x")


if __name__ == "__main__":
    main()
