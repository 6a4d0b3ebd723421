import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import fig_scale, run, setup

setup(snakemake.log[0])
run(fig_scale, snakemake.wildcards.ablation, dict(zip(snakemake.params.tasks, snakemake.input.tables)), snakemake.output.png, snakemake.output.pdf)
