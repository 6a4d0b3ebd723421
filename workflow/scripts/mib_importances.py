import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.jobs import TableJob
from circuitloc.report.mib import write_importances
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
job = TableJob.from_rule(snakemake.wildcards, dict(snakemake.params.items()))
models = snakemake.params.models
run(write_importances, job, dict(zip(models, snakemake.input.cards)), dict(zip(models, snakemake.input.scores)),
    snakemake.output.importances)
