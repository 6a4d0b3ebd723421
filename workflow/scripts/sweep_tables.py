import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures.draw import fig_sweep
from circuitloc.report.records import FigureFiles, SweepInputs, SweepStats, TableFiles, TableJob
from circuitloc.report.tables.writers import write_sweep
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
params, out = snakemake.params, snakemake.output
job = TableJob.from_rule(snakemake.wildcards, dict(params.items()))
stats = SweepStats.of(params.stats, float(params.ci))
inputs = SweepInputs(snakemake.input.table1, dict(zip(params.models, snakemake.input.cards, strict=True)), params.meta,
                     snakemake.input.layers[0] if snakemake.input.layers else None)
summary, per_model = run(write_sweep, job, inputs, stats,
                         (TableFiles(out.csv, out.md), TableFiles(out.paired, out.paired_md)), out.models)
run(fig_sweep, job, stats.ci, summary, per_model, FigureFiles(out.png, out.pdf))
