import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import for_each_ablation, score
from circuitloc.engine.settings import JobSettings, ScoreFiles
from circuitloc.modelcard import ModelCard
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads)
job = JobSettings.from_params(dict(snakemake.params.items()), run(ModelCard.read, snakemake.input.card),
                              task=snakemake.wildcards.task)
files = [ScoreFiles(s, p) for s, p in zip(snakemake.output.scores, snakemake.output.prompts, strict=True)]
run(for_each_ablation, score, job, snakemake.input.data, dict(zip(snakemake.params.ablations, files, strict=True)),
    stash=for_job(snakemake, snakemake.params.resume))
