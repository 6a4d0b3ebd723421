from circuitloc.pipeline import build_model, run, setup

setup(snakemake.log[0], snakemake.threads)
run(build_model, snakemake.wildcards.model, snakemake.params.spec, snakemake.output.card, snakemake.params.weights)
