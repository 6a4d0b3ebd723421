import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.figures import fig_sweep
from circuitloc.report.writers import write_sweep
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
task, ablation, ci, out = snakemake.wildcards.task, snakemake.wildcards.ablation, snakemake.params.ci, snakemake.output
summary, per_model = run(write_sweep, task=task, ablation=ablation, table1_csv=snakemake.input.table1,
                         cards=dict(zip(snakemake.params.models, snakemake.input.cards)), meta=snakemake.params.meta,
                         ci=ci, out_csv=out.csv, out_md=out.md, out_paired_csv=out.paired,
                         out_paired_md=out.paired_md, opts=snakemake.params.stats,
                         threshold=snakemake.params.threshold,
                         layer_table1_csv=snakemake.input.layers[0] if snakemake.input.layers else None)
run(fig_sweep, task=task, ablation=ablation, ci=ci, summary=summary, per_model=per_model, png=out.png, pdf=out.pdf,
    threshold=snakemake.params.threshold)
