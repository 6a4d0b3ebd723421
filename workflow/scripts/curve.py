import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
from circuitloc.io import read_json
from circuitloc.pipeline import curve
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
run(curve, task_name=snakemake.wildcards.task, card=run(read_json, snakemake.input.card),
    dataset=snakemake.input.data, scores_path=snakemake.input.scores, ablation=snakemake.wildcards.ablation,
    cfg=snakemake.params.cfg, seed=snakemake.params.seed, out_curve=snakemake.output.curve,
    out_control=snakemake.output.control, batch_tokens=snakemake.params.batch_tokens,
    device=snakemake.params.device, opts=snakemake.params.opts, bootstrap=snakemake.params.bootstrap,
    metric=snakemake.params.metric)
