import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.io import read_json
from circuitloc.pipeline import run, setup, specificity

setup(snakemake.log[0], snakemake.threads, snakemake.params.opts["seed"])
tasks = snakemake.params.tasks
run(specificity, run(read_json, snakemake.input.card), snakemake.wildcards.ablation, dict(zip(tasks, snakemake.input.data)),
    dict(zip(tasks, snakemake.input.scores)), snakemake.input.neutral, snakemake.output[0],
    snakemake.params.batch_tokens, snakemake.params.device, snakemake.params.opts)
