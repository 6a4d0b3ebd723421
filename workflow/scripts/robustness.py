import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import run, setup, write_robustness

setup(snakemake.log[0])
run(write_robustness, {tuple(p): f for p, f in zip(snakemake.params.pairs, snakemake.input)},
    snakemake.output.csv, snakemake.output.md)
