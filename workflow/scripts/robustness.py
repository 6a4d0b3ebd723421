import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.tables.writers import write_robustness
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
run(write_robustness, table1s={tuple(p): f for p, f in zip(snakemake.params.pairs, snakemake.input)},
    out_csv=snakemake.output.csv, out_md=snakemake.output.md)
