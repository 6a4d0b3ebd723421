import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import build_shared_facts, run, setup

setup(snakemake.log[0], snakemake.threads, snakemake.params.seed)
run(build_shared_facts, snakemake.wildcards.model, dict(zip(snakemake.params.members, snakemake.input.members)), snakemake.params.n_score,
    snakemake.params.seed, snakemake.output.data, snakemake.output.filter)
