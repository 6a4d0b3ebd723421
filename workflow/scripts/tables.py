import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.records import TableFiles, TableJob, by_model
from circuitloc.report.tables.writers import write_table1, write_table2
from circuitloc.runner import run, setup

# one job per task: Tables 1 and 2 of each ablation (inputs and outputs by the ablation's position)
setup(log_path=snakemake.log[0])
params, out = dict(snakemake.params.items()), snakemake.output
for i, ablation in enumerate(params["ablations"]):
    job = TableJob.from_rule(snakemake.wildcards, params, ablation)
    cards, curves, scores, controls = (by_model(snakemake.input, kind, i, params["models"][ablation])
                                       for kind in ("cards", "curves", "scores", "controls"))
    run(write_table1, job, cards, scores, curves, TableFiles(out.table1[i], out.table1_md[i]))
    run(write_table2, job, cards, curves, controls, TableFiles(out.table2[i], out.table2_md[i]), scores=scores)
