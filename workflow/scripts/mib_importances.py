import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.records import TableJob, by_model
from circuitloc.report.tables.mib import write_importances
from circuitloc.runner import run, setup

# one job per task: every ablation's folder (inputs and outputs by the ablation's position)
setup(log_path=snakemake.log[0])
params = dict(snakemake.params.items())
for i, ablation in enumerate(params["ablations"]):
    cards, scores = (by_model(snakemake.input, kind, i, params["models"][ablation]) for kind in ("cards", "scores"))
    run(write_importances, TableJob.from_rule(snakemake.wildcards, params, ablation), cards, scores,
        snakemake.output.importances[i])
