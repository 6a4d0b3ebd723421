import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.datasets import build_dataset
from circuitloc.engine.settings import JobSettings
from circuitloc.modelcard import ModelCard
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
job = JobSettings.from_params(dict(snakemake.params.items()), run(ModelCard.read, snakemake.input.card),
                              task=snakemake.wildcards.task)
run(build_dataset, job, snakemake.params.cfg, dict(snakemake.input.items()), snakemake.output.data,
    snakemake.output.filter)
