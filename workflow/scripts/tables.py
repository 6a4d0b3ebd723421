import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import run, setup, write_table1, write_table2


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(snakemake.log[0])
task, ablation, cards = snakemake.wildcards.task, snakemake.wildcards.ablation, _by_model(snakemake.input.cards)
curves = _by_model(snakemake.input.curves)
run(write_table1, task, ablation, cards, _by_model(snakemake.input.scores), curves, snakemake.params.threshold,
    snakemake.output.table1, snakemake.output.table1_md)
run(write_table2, task, ablation, cards, curves, _by_model(snakemake.input.controls), snakemake.output.table2,
    snakemake.output.table2_md, _by_model(snakemake.input.scores))
