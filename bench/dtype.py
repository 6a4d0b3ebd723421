"""What running a config in bfloat16 instead of float32 changes: the time of each job and the
scores it finds. Two runs of one config that differ only in the models' `dtype:`, compared side by
side. Not a test: it prints tables.

    python bench/dtype.py FLOAT32/results BFLOAT16/results
    python bench/dtype.py --matmul      # this CPU's matrix-product rate in each dtype, one thread

Jobs: every benchmark file (Snakemake's `benchmark:`, one per job) present in both runs, with its
wall seconds and CPU seconds in each dtype and their ratio. Scores: every scores table
(`scores/{task}/{model}/{ablation}.parquet`) present in both, with the clean metric in each, the
top unit and its damage in each, the Spearman correlation of the units' drops, how many of the
float32 top 5 and top 10 are in bfloat16's, and the largest difference of a unit's damage (its
drop as a share of clean minus floor). `--matmul`: GFLOP/s of one matrix product in float32 and
bfloat16 (by default Qwen2.5-1.5B's MLP shape on 512 tokens), the CPU's own speed ratio, which
differs by whether it has bfloat16 instructions (`lscpu`: avx512_bf16, amx_bf16). A dataset
that depends on the model's logits (facts keeps the facts the model knows) may hold other prompts
in each dtype; `n_prompts` says how many.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from circuitloc.report.tables.cost import read_benchmark
from circuitloc.stats import agreement


def jobs(a: Path, b: Path) -> pl.DataFrame:
    rows = []
    for pa in sorted((a / "benchmarks").rglob("*.tsv")):
        rel = pa.relative_to(a / "benchmarks")
        pb = b / "benchmarks" / rel
        if not pb.is_file():
            continue
        (wa, ca), (wb, cb) = ((c["wall_s"], c["cpu_s"]) for c in (read_benchmark(pa), read_benchmark(pb)))
        rows.append({"job": str(rel.with_suffix("")), "s_float32": wa, "s_bfloat16": wb,
                     "cpu_float32": ca, "cpu_bfloat16": cb, "x_faster": wa / wb if wb else float("nan")})
    return pl.DataFrame(rows)


def scores(a: Path, b: Path) -> pl.DataFrame:
    rows = []
    for pa in sorted((a / "scores").rglob("*.parquet")):
        if pa.name.endswith(".prompts.parquet"):
            continue
        rel = pa.relative_to(a / "scores")
        pb = b / "scores" / rel
        if not pb.is_file():
            continue
        fa, fb = pl.read_parquet(pa), pl.read_parquet(pb)
        metric = fa["metric"][0]
        both = fa.select("unit", "drop", "damage").join(fb.select("unit", "drop", "damage"), on="unit",
                                                        suffix="_bf16")
        top_a = fa.sort("drop", descending=True)["unit"].to_list()
        top_b = fb.sort("drop", descending=True)["unit"].to_list()
        rows.append({
            "scores": str(rel.with_suffix("")),
            "n_prompts": f"{fa['n_prompts'][0]}/{fb['n_prompts'][0]}",
            "clean_float32": float(fa[f"{metric}_clean"][0]), "clean_bfloat16": float(fb[f"{metric}_clean"][0]),
            "top_float32": top_a[0], "top_bfloat16": top_b[0],
            "damage_float32": float(fa.filter(pl.col("unit") == top_a[0])["damage"][0]),
            "damage_bfloat16": float(fb.filter(pl.col("unit") == top_b[0])["damage"][0]),
            "spearman": agreement(both["drop"], both["drop_bf16"], both["unit"])["spearman"],
            "top5": len(set(top_a[:5]) & set(top_b[:5])), "top10": len(set(top_a[:10]) & set(top_b[:10])),
            "max_damage_diff": float((both["damage"] - both["damage_bf16"]).abs().max()),
        })
    return pl.DataFrame(rows)


def matmul(m: int, k: int, n: int, reps: int = 10) -> dict:
    """GFLOP/s of an [m, k] x [k, n] product in float32 and bfloat16 on one thread (two warm-ups)."""
    import time

    import torch

    torch.set_num_threads(1)
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        a, b = torch.randn(m, k).to(dt), torch.randn(k, n).to(dt)
        for _ in range(2):
            a @ b
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        out[str(dt).removeprefix("torch.")] = 2 * m * k * n * reps / (time.perf_counter() - t) / 1e9
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("float32", type=Path, nargs="?", help="results directory of the float32 run")
    ap.add_argument("bfloat16", type=Path, nargs="?", help="results directory of the bfloat16 run")
    ap.add_argument("--matmul", action="store_true", help="time one matrix product in each dtype instead")
    ap.add_argument("--shape", nargs=3, type=int, default=[512, 1536, 8960], metavar=("M", "K", "N"),
                    help="--matmul's [M, K] x [K, N] (default: 512 tokens through Qwen2.5-1.5B's MLP)")
    args = ap.parse_args(argv)
    if args.matmul:
        r = matmul(*args.shape)
        print(f"matmul {args.shape}, one thread: float32 {r['float32']:.1f} GFLOP/s, bfloat16 "
              f"{r['bfloat16']:.1f} GFLOP/s: bfloat16 at {r['bfloat16'] / r['float32']:.2f}x float32's rate")
        return
    if args.float32 is None or args.bfloat16 is None:
        ap.error("give the two results directories (float32, bfloat16), or --matmul")
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, float_precision=3, fmt_str_lengths=60,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        j = jobs(args.float32, args.bfloat16)
        print("## jobs in both runs: wall and CPU seconds")
        print(j)
        if len(j):
            print(f"all of them: {j['s_float32'].sum():.0f} s float32, {j['s_bfloat16'].sum():.0f} s bfloat16, "
                  f"{j['s_float32'].sum() / j['s_bfloat16'].sum():.2f}x")
        print("## scores tables in both runs")
        print(scores(args.float32, args.bfloat16))


if __name__ == "__main__":
    main()
