import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import specificity_each
from circuitloc.engine.settings import JobSettings, SpecificityFiles
from circuitloc.modelcard import ModelCard
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.opts["seed"])
tasks, ablations = snakemake.params.tasks, snakemake.params.ablations
job = JobSettings.from_params(dict(snakemake.params.items()), run(ModelCard.read, snakemake.input.card))
scores = [snakemake.input.scores[i:i + len(tasks)] for i in range(0, len(snakemake.input.scores), len(tasks))]
files = {a: SpecificityFiles(datasets=dict(zip(tasks, snakemake.input.data, strict=True)),
                             scores=dict(zip(tasks, s, strict=True)), neutral=snakemake.input.neutral, out=out)
         for a, s, out in zip(ablations, scores, snakemake.output, strict=True)}
run(specificity_each, job, files, stash=for_job(snakemake, snakemake.params.resume))
