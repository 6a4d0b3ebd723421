import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import run, setup, write_stability

setup(snakemake.log[0])
run(write_stability, snakemake.wildcards.task, snakemake.params.entries, snakemake.params.primary,
    snakemake.output.csv, snakemake.output.md, snakemake.output.png, snakemake.output.pdf)
