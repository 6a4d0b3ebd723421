import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.tables.writers import write_claims
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
run(write_claims, cards=dict(zip(snakemake.params.models, snakemake.input.cards)),
    tables=dict(zip(snakemake.params.names, snakemake.input.tables)), threshold=snakemake.params.threshold,
    out_csv=snakemake.output.csv, out_md=snakemake.output.md)
