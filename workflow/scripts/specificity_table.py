import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import run, setup, write_specificity_table

setup(snakemake.log[0])
run(write_specificity_table, list(snakemake.input), snakemake.output.csv, snakemake.output.md)
