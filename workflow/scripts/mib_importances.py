import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.jobs import TableJob
from circuitloc.report.mib import write_importances
from circuitloc.runner import run, setup

# one job per task: every ablation's folder (inputs and outputs by the ablation's position)
setup(log_path=snakemake.log[0])
for i, ablation in enumerate(snakemake.params.ablations):
    models = snakemake.params.models[ablation]
    run(write_importances, TableJob(snakemake.wildcards.task, ablation), dict(zip(models, snakemake.input[f"cards_{i}"])),
        dict(zip(models, snakemake.input[f"scores_{i}"])), snakemake.output.importances[i])
