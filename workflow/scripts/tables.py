import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.writers import write_table1, write_table2
from circuitloc.runner import run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(log_path=snakemake.log[0])
task, ablation, cards = snakemake.wildcards.task, snakemake.wildcards.ablation, _by_model(snakemake.input.cards)
curves, scores = _by_model(snakemake.input.curves), _by_model(snakemake.input.scores)
run(write_table1, task=task, ablation=ablation, cards=cards, scores=scores, curves=curves,
    threshold=snakemake.params.threshold, out_csv=snakemake.output.table1, out_md=snakemake.output.table1_md,
    min_heldout=snakemake.params.min_heldout)
run(write_table2, task=task, ablation=ablation, cards=cards, curves=curves, controls=_by_model(snakemake.input.controls),
    out_csv=snakemake.output.table2, out_md=snakemake.output.table2_md, scores=scores,
    min_heldout=snakemake.params.min_heldout)
