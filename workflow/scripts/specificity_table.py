import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.runner import run, setup
from circuitloc.writers import write_specificity_table

setup(log_path=snakemake.log[0])
run(write_specificity_table, parts=list(snakemake.input), out_csv=snakemake.output.csv, out_md=snakemake.output.md)
