import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import build_model, run, setup

setup(snakemake.log[0], snakemake.threads)
run(build_model, snakemake.wildcards.model, snakemake.params.spec, snakemake.output.card, snakemake.params.weights)
