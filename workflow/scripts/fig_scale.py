import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures import fig_scale
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
run(fig_scale, tables=dict(zip(snakemake.params.tasks, snakemake.input.tables)), png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    ablation=snakemake.wildcards.ablation, threshold=snakemake.params.threshold)
