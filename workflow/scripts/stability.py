import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures.draw import fig_stability
from circuitloc.report.tables.writers import write_stability
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
task, primary, out = snakemake.wildcards.task, snakemake.params.primary, snakemake.output
panels = run(write_stability, task=task, entries=snakemake.params.entries, primary=primary, out_csv=out.csv,
             out_md=out.md)
run(fig_stability, task=task, primary=primary, panels=panels, png=out.png, pdf=out.pdf)
