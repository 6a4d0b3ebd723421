# circuitloc: how concentrated are the attention-head circuits of language models?
# Stages: models -> datasets -> scores -> curves -> tables / figures (see README).
import os
import sys
import time

from snakemake.utils import min_version, validate

min_version("9.0")


# The embedded default always loads; every --configfile, then --config k=v, merges onto it
# (recursively; a layer's own `models:` replaces the models below it, so two configs' models never
# mix). circuitloc.plan.configload does the merge; an unknown key anywhere is an error naming its path.
sys.path.insert(0, os.path.join(workflow.basedir, "src"))
from circuitloc.plan.configload import check_unknown_keys, effective_config  # noqa: E402  (no heavy imports)

_effective = effective_config(os.path.join(workflow.basedir, "config", "config.yaml"),
                              workflow.overwrite_configfiles, workflow.config_settings.config)
config.clear()
config.update(_effective)
check_unknown_keys(config, os.path.join(workflow.basedir, "config", "schema.yaml"))
validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/datasets.smk"
include: "rules/scores.smk"
include: "rules/curves.smk"
include: "rules/tables.smk"
include: "rules/figures.smk"
include: "rules/analysis.smk"
include: "rules/sweep.smk"
include: "rules/cost.smk"
include: "rules/report.smk"


# A failed job's reason is in its own log: print it last, where the user is looking.
_STARTED = time.time()


# The cost table's job list is Snakemake's own DAG, recorded once it is built (rules/cost.smk).
onstart:
    from circuitloc.plan.dag import record_dag

    record_dag(workflow.dag.jobs, DAG_RECORD, exclude=("cost", "report", "all"))


onerror:
    from circuitloc.plan.console import explain_failures

    explain_failures(log, since=_STARTED)


rule all:
    input:
        all_outputs(),
    default_target: True
