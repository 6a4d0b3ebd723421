import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import curve, for_each_ablation
from circuitloc.engine.settings import CurveFiles, JobSettings
from circuitloc.modelcard import ModelCard
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
job = JobSettings.from_params(dict(snakemake.params.items()), run(ModelCard.read, snakemake.input.card),
                              task=snakemake.wildcards.task, curves=snakemake.params.cfg)
out = snakemake.output
files = [CurveFiles(s, c, k) for s, c, k in zip(snakemake.input.scores, out.curve, out.control, strict=True)]
run(for_each_ablation, curve, job, snakemake.input.data, dict(zip(snakemake.params.ablations, files, strict=True)),
    stash=for_job(snakemake, snakemake.params.resume))
