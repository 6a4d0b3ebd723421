import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.kernels import pin

# before anything imports torch: a pinned toy recipe trains on one CPU kernel path on every machine
pin(snakemake.params.spec.get("toy", {}).get("kernels", "host"))

from circuitloc.engine.select import engine_of  # noqa: E402
from circuitloc.models.build import build_model  # noqa: E402
from circuitloc.runner import run, setup  # noqa: E402

setup(log_path=snakemake.log[0], threads=snakemake.threads)
run(build_model, name=snakemake.wildcards.model, spec=snakemake.params.spec, card_path=snakemake.output.card,
    weights_dir=snakemake.params.weights, engine_of=engine_of)
