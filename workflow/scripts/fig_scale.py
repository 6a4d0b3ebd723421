import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures.draw import fig_scale
from circuitloc.runner import run, setup

# one job: the scale figure of each ablation, from each task's Table 1 under it
setup(log_path=snakemake.log[0])
pairs, out = [tuple(p) for p in snakemake.params.pairs], snakemake.output
for i, ablation in enumerate(snakemake.params.ablations):
    tables = {t: f for (t, a), f in zip(pairs, snakemake.input.tables, strict=True) if a == ablation}
    run(fig_scale, tables=tables, png=out.png[i], pdf=out.pdf[i], ablation=ablation,
        threshold=snakemake.params.threshold)
