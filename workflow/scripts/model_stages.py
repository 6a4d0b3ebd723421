import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.stages import run_stages, task_files
from circuitloc.modelcard import ModelCard
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
params = dict(snakemake.params.items())
stages = task_files(params["tasks"], params["ablations"], dict(snakemake.input.items()), snakemake.output)
run(run_stages, params, run(ModelCard.read, snakemake.input.card), stages, params["ablations"],
    stash=for_job(snakemake, params["resume"]))
