import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.select import engine_of
from circuitloc.models.build import build_model
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads)
run(build_model, name=snakemake.wildcards.model, spec=snakemake.params.spec, card_path=snakemake.output.card,
    weights_dir=snakemake.params.weights, engine_of=engine_of)
