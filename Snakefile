# circuitloc: how concentrated are the attention-head circuits of language models?
# Stages: models -> datasets -> scores -> curves -> tables / figures (see README).
import time

from snakemake.utils import min_version, validate

min_version("8.0")


# The embedded default unless a --configfile is given: two configs must never merge their models.
if not config:

    configfile: "config/config.yaml"


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
    from circuitloc.cost import record_dag

    record_dag(workflow.dag.jobs, DAG_RECORD, exclude=("cost", "report", "all"))


onerror:
    from circuitloc.console import explain_failures

    explain_failures(log, since=_STARTED)


rule all:
    input:
        all_outputs(),
    default_target: True
