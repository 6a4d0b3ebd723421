import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures.draw import fig_curves, fig_heatmap
from circuitloc.report.records import FigureFiles, TableJob, by_model
from circuitloc.runner import run, setup

# one job per task: Figures 1 and 2 of each ablation (inputs and outputs by the ablation's position)
setup(log_path=snakemake.log[0])
params, out = dict(snakemake.params.items()), snakemake.output
for i, ablation in enumerate(params["ablations"]):
    models = params["models"][ablation]
    shown, total = len(models), len(params["all_models"][ablation])
    note = "" if shown == total else f"{shown} of {total} models (figures.max_models)"
    job = TableJob.from_rule(snakemake.wildcards, params, ablation)
    cards, scores, curves = (by_model(snakemake.input, kind, i, models) for kind in ("cards", "scores", "curves"))
    run(fig_heatmap, job, scores, FigureFiles(out.fig1[i], out.fig1_pdf[i]), note=note)
    run(fig_curves, job, cards, curves, FigureFiles(out.fig2[i], out.fig2_pdf[i]), note=note)
