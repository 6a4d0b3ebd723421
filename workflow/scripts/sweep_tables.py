import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import run, setup, write_sweep

setup(snakemake.log[0])
out = snakemake.output
run(write_sweep, snakemake.wildcards.task, snakemake.wildcards.ablation, snakemake.input.table1,
    dict(zip(snakemake.params.models, snakemake.input.cards)), snakemake.params.meta, snakemake.params.ci,
    out.csv, out.md, out.paired, out.paired_md, out.png, out.pdf, snakemake.params.stats)
