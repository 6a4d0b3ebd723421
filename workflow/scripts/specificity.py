import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import specificity
from circuitloc.engine.settings import JobSettings, SpecificityFiles
from circuitloc.io import read_card
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.opts["seed"])
tasks = snakemake.params.tasks
job = JobSettings.from_params(dict(snakemake.params.items()), run(read_card, snakemake.input.card))
files = SpecificityFiles(datasets=dict(zip(tasks, snakemake.input.data, strict=True)),
                         scores=dict(zip(tasks, snakemake.input.scores, strict=True)),
                         neutral=snakemake.input.neutral, out=snakemake.output[0])
run(specificity, job, snakemake.wildcards.ablation, files)
