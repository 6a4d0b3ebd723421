import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.engine.pipeline import curve, for_each_ablation
from circuitloc.io import read_card
from circuitloc.resume import for_job
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0], threads=snakemake.threads, seed=snakemake.params.seed)
run(for_each_ablation, curve, task_name=snakemake.wildcards.task, card=run(read_card, snakemake.input.card),
    dataset=snakemake.input.data, ablations=snakemake.params.ablations,
    per_ablation={"scores_path": snakemake.input.scores, "out_curve": snakemake.output.curve,
                  "out_control": snakemake.output.control},
    cfg=snakemake.params.cfg, seed=snakemake.params.seed, torch_seed=snakemake.params.seed,
    batch_tokens=snakemake.params.batch_tokens, device=snakemake.params.device, opts=snakemake.params.opts,
    bootstrap=snakemake.params.bootstrap, metric=snakemake.params.metric,
    stash=for_job(snakemake, snakemake.params.resume))
