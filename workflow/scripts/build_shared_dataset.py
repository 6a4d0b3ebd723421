import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.datasets import build_shared
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
run(build_shared, snakemake.wildcards.task, snakemake.wildcards.model,
    member_paths=dict(zip(snakemake.params.members, snakemake.input.members)), n_score=snakemake.params.n_score,
    out_parquet=snakemake.output.data, out_filter=snakemake.output.filter)
