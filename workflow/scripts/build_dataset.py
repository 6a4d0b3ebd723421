import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.io import read_json
from circuitloc.pipeline import build_dataset, run, setup

setup(snakemake.log[0], snakemake.threads, snakemake.params.seed)
run(build_dataset, snakemake.wildcards.task, run(read_json, snakemake.input.card), snakemake.params.cfg,
    snakemake.params.seed, snakemake.output.data, snakemake.output.filter, snakemake.params.batch_tokens,
    snakemake.params.device, dict(snakemake.input.items()))
