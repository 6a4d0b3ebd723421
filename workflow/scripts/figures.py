import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import fig_curves, fig_heatmap, run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(snakemake.log[0])
task, ablation, out = snakemake.wildcards.task, snakemake.wildcards.ablation, snakemake.output
run(fig_heatmap, task, ablation, _by_model(snakemake.input.scores), out.fig1, out.fig1_pdf)
run(fig_curves, task, ablation, _by_model(snakemake.input.cards), _by_model(snakemake.input.curves),
    snakemake.params.threshold, out.fig2, out.fig2_pdf)
