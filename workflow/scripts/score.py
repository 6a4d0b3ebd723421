import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import for_each_ablation, score
from circuitloc.io import read_card
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads)
run(for_each_ablation, score, task_name=snakemake.wildcards.task, card=run(read_card, snakemake.input.card),
    dataset=snakemake.input.data, ablations=snakemake.params.ablations,
    per_ablation={"out_parquet": snakemake.output.scores, "out_prompts": snakemake.output.prompts},
    batch_tokens=snakemake.params.batch_tokens, device=snakemake.params.device, opts=snakemake.params.opts,
    bootstrap=snakemake.params.bootstrap, metric=snakemake.params.metric,
    stash=for_job(snakemake, snakemake.params.resume))
