import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.pipeline import fig_curves, run, setup


def _by_model(files):
    return dict(zip(snakemake.params.models, files))


setup(snakemake.log[0])
run(fig_curves, snakemake.wildcards.task, snakemake.wildcards.ablation, _by_model(snakemake.input.cards),
    _by_model(snakemake.input.curves), snakemake.params.threshold, snakemake.output.png, snakemake.output.pdf)
