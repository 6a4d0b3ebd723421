import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures import fig_curves, fig_heatmap
from circuitloc.runner import run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(log_path=snakemake.log[0])
task, ablation, out = snakemake.wildcards.task, snakemake.wildcards.ablation, snakemake.output
shown, total = len(snakemake.params.models), int(snakemake.params.n_models)
note = "" if shown == total else f"{shown} of {total} models (figures.max_models)"
run(fig_heatmap, task=task, ablation=ablation, scores=_by_model(snakemake.input.scores), png=out.fig1,
    pdf=out.fig1_pdf, note=note)
run(fig_curves, task=task, ablation=ablation, cards=_by_model(snakemake.input.cards),
    curves=_by_model(snakemake.input.curves), threshold=snakemake.params.threshold, png=out.fig2, pdf=out.fig2_pdf,
    note=note)
