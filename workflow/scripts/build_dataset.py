import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.datasets import build_dataset
from circuitloc.io import read_card
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
run(build_dataset, task_name=snakemake.wildcards.task, card=run(read_card, snakemake.input.card),
    cfg=snakemake.params.cfg, seed=snakemake.params.seed, out_parquet=snakemake.output.data,
    out_filter=snakemake.output.filter, batch_tokens=snakemake.params.batch_tokens, device=snakemake.params.device,
    inputs=dict(snakemake.input.items()))
