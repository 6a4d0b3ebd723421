import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.io import read_json
from circuitloc.pipeline import curve, run, setup

setup(snakemake.log[0], snakemake.threads, snakemake.params.seed)
run(curve, snakemake.wildcards.task, run(read_json, snakemake.input.card), snakemake.input.data,
    snakemake.input.scores, snakemake.wildcards.ablation, snakemake.params.cfg, snakemake.params.seed,
    snakemake.output.curve, snakemake.output.control, snakemake.params.batch_tokens,
    snakemake.params.device, snakemake.params.opts, snakemake.params.bootstrap)
