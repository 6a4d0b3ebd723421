import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.jobs import TableFiles, TableJob
from circuitloc.report.writers import write_table1, write_table2
from circuitloc.runner import run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(log_path=snakemake.log[0])
job, out = TableJob.from_rule(snakemake.wildcards, dict(snakemake.params.items())), snakemake.output
cards, curves, scores = (_by_model(getattr(snakemake.input, k)) for k in ("cards", "curves", "scores"))
run(write_table1, job, cards, scores, curves, TableFiles(out.table1, out.table1_md))
run(write_table2, job, cards, curves, _by_model(snakemake.input.controls), TableFiles(out.table2, out.table2_md),
    scores=scores)
