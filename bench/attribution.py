"""How well attribution (engine.attribution: one forward and one backward) proposes what the exact
engine measures: per model, task, kind and unit, the Spearman correlation of estimated and exact
single-unit drops on the scoring prompts, and top-5 / top-10 recall (the share of the exact top k
among attribution's top k), with the seconds of each. The guided greedy trusts attribution only
this far: it runs attribution's best c exactly.

    python bench/attribution.py --results results --models smollm2_135m toy_mha toy_gqa
    python bench/attribution.py ... --ig 4          # integrated gradients over 4 points as well
    python bench/attribution.py --results runs/ladder/results --exact scores --kinds zero --units query kv

`--exact scores` reads the exact drops from the run's score tables (results/scores/{task}/{model}/
{kind}-{unit}.parquet: the same units on the same scoring prompts) where the run has them, so a large
model's attribution is measured without scanning it again; the table's `exact s` is then blank.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def recall(exact, est, k: int) -> float:
    """Share of the exact top k (by drop) among the estimate's top k."""
    import numpy as np

    k = min(k, len(exact))
    return len(set(np.argsort(-exact)[:k]) & set(np.argsort(-est)[:k])) / k


def stored_drops(scores: Path, units, n_prompts: int):
    """The run's exact drops of `units` (by label) from its score table, or None where it has none;
    refused when the table was scored on another number of prompts than this job's."""
    import numpy as np
    import polars as pl

    if not scores.is_file():
        return None
    table = pl.read_parquet(scores, columns=["unit", "drop", "n_prompts"])
    if set(table["n_prompts"].to_list()) != {n_prompts}:
        raise SystemExit(f"{scores}: scored on {table['n_prompts'][0]} prompts, this job on {n_prompts}")
    drop = dict(table.select("unit", "drop").iter_rows())
    if any(u.label not in drop for u in units):
        raise SystemExit(f"{scores}: lacks units of this ablation; rerun without --exact scores")
    return np.array([drop[u.label] for u in units], dtype=float)


def measure(job, dataset, ablation_name: str, loaded, steps: int, scores: Path | None = None) -> dict:
    """Exact and estimated drops of every unit of one ablation, and how they agree. With `scores`
    (a run's score table for this ablation) the exact drops are read from it when it exists."""
    import numpy as np
    from scipy.stats import spearmanr

    from circuitloc import metrics
    from circuitloc.engine.attribution import estimated_drops
    from circuitloc.engine.job import AblationJob

    aj = AblationJob(job, dataset, ablation_name, loaded=loaded, self_check=False)
    t = time.perf_counter()
    exact = None if scores is None else stored_drops(scores, aj.units, len(aj.prompts))
    if exact is None:
        vals = aj.probe.means([{}] + [{u.layer: list(u.heads)} for u in aj.units])
        exact = np.asarray(metrics.drop(vals[0], vals[1:], aj.task.higher_is_better))
        t_exact = time.perf_counter() - t
    else:
        t_exact = float("nan")
    t = time.perf_counter()
    est = estimated_drops(aj.probe, aj.units, steps=steps)
    t_est = time.perf_counter() - t
    return {"units": len(aj.units), "prompts": len(aj.prompts), "spearman": float(spearmanr(exact, est)[0]),
            "top5": recall(exact, est, 5), "top10": recall(exact, est, 10), "exact_s": t_exact, "attr_s": t_est}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="a run's results folder (models/, data/)")
    ap.add_argument("--models", nargs="+", default=["smollm2_135m", "toy_mha", "toy_gqa"])
    ap.add_argument("--tasks", nargs="+", default=["ioi", "induction", "facts"])
    ap.add_argument("--kinds", nargs="+", default=["zero", "mean", "resample"])
    ap.add_argument("--units", nargs="+", default=["query", "kv", "layer"])
    ap.add_argument("--ig", type=int, default=1, help="attribution points (1: linear; more: integrated gradients)")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exact", choices=["compute", "scores"], default="compute",
                    help="exact drops: computed here, or read from the run's score tables where it has them")
    args = ap.parse_args(argv)

    import torch

    from circuitloc.engine.settings import JobSettings
    from circuitloc.modelcard import ModelCard
    from circuitloc.models.load import load_engine

    torch.set_num_threads(args.threads)
    res = Path(args.results)
    print(f"attribution ({'linear' if args.ig == 1 else f'ig, {args.ig} points'}) vs exact single-unit drops, "
          f"scoring prompts, {args.threads} threads")
    print("| model | task | kind | unit | units | prompts | Spearman | top-5 | top-10 | exact s | attribution s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        card_path = res / "models" / name / "card.json"
        card = dataclasses.replace(ModelCard.read(card_path), path=str(card_path.parent / "weights"))
        loaded = load_engine(card, "cpu")
        for task in args.tasks:
            data = res / "data" / task / f"{name}.parquet"
            if not data.exists():
                continue
            job = JobSettings(card=card, batch_tokens=args.batch_tokens, task=task, min_group=8, seed=0)
            for kind in args.kinds:
                for unit in args.units:
                    if unit == "kv" and card.n_kv_heads == card.n_heads:
                        continue  # a KV group of one query head is the query unit
                    name_ = f"{kind}-{unit}"
                    stored = res / "scores" / task / name / f"{name_}.parquet" if args.exact == "scores" else None
                    r = measure(job, data, name_, loaded, args.ig, stored)
                    print(f"| {name} | {task} | {kind} | {unit} | {r['units']} | {r['prompts']} | {r['spearman']:.3f} "
                          f"| {r['top5']:.1f} | {r['top10']:.1f} | {r['exact_s']:.1f} | {r['attr_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
