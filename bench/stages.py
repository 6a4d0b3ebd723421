"""What `group_stages` saves: the same toys' datasets, scores and curves as one job per stage and
task (the default) and as one job per model (`group_stages: true`, the sweeps' setting), run one
after the other from scratch in two copies of this checkout, printed side by side with the ratio;
and whether the two give the same files. Not a test: it prints numbers.

    .venv/bin/python bench/stages.py                 # the stored test toys, every kind and unit
    .venv/bin/python bench/stages.py --cores 2

The toys are the stored ones of `.test/models` (copied, not trained), on the test config's tasks
without its family-shared condition (group_stages cannot build one), under zero, mean and resample
ablation of query heads, KV groups and layers: each toy gets 3 dataset, 3 score and 3 curve jobs in
the first layout and 1 job in the second. Only the datasets, scores and curves are asked for, so
the table, figure and report jobs, the same in both, are left out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NEEDS = ("Snakefile", "rules", "workflow", "config", ".test", "envs", "report", "profiles", "resources", "src")
MODELS = ("tiny_mha", "tiny_gqa")
TASKS = ("ioi", "induction", "facts")
ABLATIONS = [f"{k}-{u}" for k in ("zero", "mean", "resample") for u in ("query", "kv", "layer")]


def layer(grouped: bool) -> dict:
    """The test config's models and tasks, every ablation for both toys, facts per model only."""
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    for m in MODELS:
        cfg["models"][m].pop("ablation", None)
    cfg["ablation"] = {**cfg.get("ablation", {}), "kinds": ["zero", "mean", "resample"],
                       "units": ["query", "kv", "layer"]}
    cfg["tasks"]["facts"]["shared"] = False
    cfg["group_stages"] = grouped
    return cfg


def targets() -> list[str]:
    return [f"results/curves/{t}/{m}/{a}.parquet" for m in MODELS for t in TASKS for a in ABLATIONS]


def run(work: Path, grouped: bool, cores: int) -> tuple[float, int]:
    """(wall seconds, jobs) of one layout, from scratch in `work`; the models stage first and
    untimed (it only copies the stored toys)."""
    work.mkdir(parents=True)
    for name in NEEDS:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, work / name)
    (work / "bench.yaml").write_text(yaml.safe_dump(layer(grouped), sort_keys=False))
    smk = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
    cards = [f"results/models/{m}/card.json" for m in MODELS]
    subprocess.run([*smk, *cards, "--configfile", "bench.yaml"], cwd=work, check=True, capture_output=True)
    t0 = time.perf_counter()
    p = subprocess.run([*smk, *targets(), "--configfile", "bench.yaml"], cwd=work, check=True, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    jobs = sum(1 for line in p.stderr.splitlines() if line.startswith("Finished job"))
    return wall, jobs


def same_files(a: Path, b: Path) -> tuple[int, list[str]]:
    """(files compared, those that differ): every dataset, score and curve table, read by polars."""
    import polars as pl

    files = sorted(p.relative_to(a) for stage in ("data", "scores", "curves")
                   for p in (a / "results" / stage).rglob("*.parquet"))
    differ = [str(f) for f in files if not pl.read_parquet(a / f).equals(pl.read_parquet(b / f))]
    return len(files), differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=int, default=1, help="jobs at once (1: the per-job cost, undisturbed)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp:
        per_stage = run(Path(tmp) / "per_stage", False, a.cores)
        grouped = run(Path(tmp) / "grouped", True, a.cores)
        n, differ = same_files(Path(tmp) / "per_stage", Path(tmp) / "grouped")
    print(f"{len(MODELS)} stored toys x {len(TASKS)} tasks x {len(ABLATIONS)} ablations, --cores {a.cores}")
    print(f"{'':24s}{'per stage':>12s}{'per model':>12s}")
    print(f"{'jobs':24s}{per_stage[1]:12d}{grouped[1]:12d}")
    print(f"{'wall seconds':24s}{per_stage[0]:12.1f}{grouped[0]:12.1f}")
    print(f"{'per model / per stage':24s}{'':12s}{grouped[0] / per_stage[0]:11.2f}x")
    print(f"files compared: {n}; differing: {len(differ)}" + (f" ({', '.join(differ[:5])})" if differ else ""))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
