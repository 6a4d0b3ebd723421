import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.tables.writers import write_sweep_overview
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
run(write_sweep_overview, paired=dict(zip(snakemake.params.pairs, snakemake.input.paired)),
    out_csv=snakemake.output.csv, out_md=snakemake.output.md, opts=snakemake.params.stats,
    extra=dict(zip(snakemake.params.extra, snakemake.input.extra)))
