import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.io import read_json
from circuitloc.pipeline import run, score, setup

setup(snakemake.log[0], snakemake.threads)
run(score, snakemake.wildcards.task, run(read_json, snakemake.input.card), snakemake.input.data,
    snakemake.wildcards.ablation, snakemake.output.scores, snakemake.output.prompts, snakemake.params.batch_tokens,
    snakemake.params.device, snakemake.params.opts, snakemake.params.bootstrap)
