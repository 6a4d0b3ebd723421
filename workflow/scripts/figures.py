import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures import fig_curves, fig_heatmap
from circuitloc.report.jobs import FigureFiles, TableJob
from circuitloc.runner import run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(log_path=snakemake.log[0])
job, out = TableJob.from_rule(snakemake.wildcards, dict(snakemake.params.items())), snakemake.output
shown, total = len(snakemake.params.models), int(snakemake.params.n_models)
note = "" if shown == total else f"{shown} of {total} models (figures.max_models)"
run(fig_heatmap, job, _by_model(snakemake.input.scores), FigureFiles(out.fig1, out.fig1_pdf), note=note)
run(fig_curves, job, _by_model(snakemake.input.cards), _by_model(snakemake.input.curves),
    FigureFiles(out.fig2, out.fig2_pdf), note=note)
