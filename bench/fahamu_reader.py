"""Peak memory and time of the fahamu/ioi reader (tasks.fahamu.read_fahamu) on a synthetic parquet of
the 26 M-row file's size, built from the 30 templates: the reader scans lazily and samples a
seeded pool, so neither should grow with the file (goal: < 1 GB peak RSS, < 1 minute).

    python bench/fahamu_reader.py                      # 26 M rows, pool of 2000 (the paper's 4 x 500)
    python bench/fahamu_reader.py --rows 5000000       # a smaller file where 26 M takes too long
    python bench/fahamu_reader.py --file my.parquet    # an existing file (e.g. the real mecha_ioi_26m)

The reader runs in a fresh child process; its peak RSS (ru_maxrss) includes the interpreter, torch,
and polars imports, printed separately as the baseline.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def write_synthetic(path: Path, rows: int, seed: int = 0, distinct: int = 200_000, chunk: int = 2_000_000):
    """`rows` sentences (with their final name, as fahamu/ioi stores them): `distinct` generated ones,
    drawn with replacement and written chunk by chunk (one row group each) to keep this process small."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from circuitloc.tasks import ioi

    pool = pa.array(ioi.synthetic_fahamu(distinct, seed)["sentence"].to_list(), pa.string())
    rng = np.random.default_rng(seed)
    schema = pa.schema([("ioi_sentences", pa.string())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            w.write_table(pa.table({"ioi_sentences": pool.take(rng.integers(0, distinct, n))}, schema=schema),
                          row_group_size=200_000)


def _read(path, pool, seed, out):
    import polars  # noqa: F401  (imports first: the baseline)

    from circuitloc.tasks import fahamu

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    rows, counts = fahamu.read_fahamu(path, pool, seed)
    dt = time.perf_counter() - t0
    out.put({"seconds": dt, "baseline_mb": base / 1024, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "kept": len(rows), **counts})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=26_000_000)
    ap.add_argument("--pool", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--file", help="read this parquet instead of writing a synthetic one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.file) if args.file else Path(tmp) / "synthetic_ioi.parquet"
        if not args.file:
            t0 = time.perf_counter()
            write_synthetic(path, args.rows, args.seed)
            print(f"wrote {args.rows:,} rows ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s")
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_read, args=(str(path), args.pool, args.seed, q))
        p.start()
        r = q.get()
        p.join()
    print(f"read_fahamu: {r['source_rows']:,} rows, pool {args.pool}: {r['seconds']:.1f} s, peak RSS "
          f"{r['peak_mb']:.0f} MB (after imports {r['baseline_mb']:.0f} MB, so +{r['peak_mb'] - r['baseline_mb']:.0f} MB "
          f"for the read); sampled {r['sampled']}, matched {r['matched_template']}, own template {r['own_template']}, unparsed {r['dropped_unparsed']}, kept {r['kept']}")
    ok = r["peak_mb"] < 1024 and r["seconds"] < 60
    print("goal (< 1 GB, < 1 minute):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
