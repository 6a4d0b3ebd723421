import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import specificity
from circuitloc.io import read_card
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.opts["seed"])
tasks = snakemake.params.tasks
run(specificity, card=run(read_card, snakemake.input.card), ablation=snakemake.wildcards.ablation,
    datasets=dict(zip(tasks, snakemake.input.data)), scores=dict(zip(tasks, snakemake.input.scores)),
    neutral_path=snakemake.input.neutral, out_parquet=snakemake.output[0],
    batch_tokens=snakemake.params.batch_tokens, device=snakemake.params.device, opts=snakemake.params.opts,
    metrics=snakemake.params.metrics, bootstrap=snakemake.params.bootstrap)
