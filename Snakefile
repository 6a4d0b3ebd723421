# circuitloc: how concentrated are the attention-head circuits of language models?
# Stages: models -> datasets -> scores -> curves -> tables / figures (see README).
import os
import sys
import time

from snakemake.utils import min_version

min_version("9.0")


# The checkout holding this Snakefile: not the working directory (--directory), nor the caller's
# directory when the workflow is used as a module.
ROOT = workflow.current_basedir.get_path_or_uri(secret_free=True)
sys.path.insert(0, os.path.join(ROOT, "src"))
from circuitloc.errors import ConfigError  # noqa: E402  (no heavy imports)
from circuitloc.plan.workflow_config import prepare  # noqa: E402

# The embedded default always loads; every --configfile, then --config k=v, merges onto it
# (recursively; a layer's own `models:` replaces the models below it, so two configs' models never
# mix). An unknown key anywhere is an error naming its path; then the schema, with its defaults.
try:
    prepare(config, workflow, ROOT)
except ConfigError as e:  # one line per problem, without a traceback
    sys.exit(str(e))


# The report opens on the run's answer once the run has written it (rule landing), else on the
# workflow's description.
from circuitloc.plan.report import report_text  # noqa: E402


report: report_text(ROOT)


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/datasets.smk"
include: "rules/stages.smk"
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
# This workflow's rule names as the run knows them: a caller's `use rule * from circuitloc as x_*`
# renames them (plan.dag.own_rule_name maps them back).
_RENAMED = workflow.modifier.modify_rulename("\0")


# The cost table's job list is Snakemake's own DAG, recorded once it is built (rules/cost.smk), by
# the run that makes the cost table only: Snakemake's lock lets one run at a time make it, so a
# concurrent run on other targets never replaces its record.
def _on_start(log=None):
    from circuitloc.plan.command import record as record_command
    from circuitloc.plan.dag import own_rule_name, plan_summary, record_dag

    # the user's command, for the jobs' recovery hints (circuitloc.plan.command)
    record_command(sys.argv, workflow.dag_settings.targets, workflow.workdir_init)
    name = lambda rule: own_rule_name(rule, _RENAMED)
    print(plan_summary(config, workflow.dag.needrun_jobs()), file=sys.stderr)
    if any(name(j.rule.name) == "cost" for j in workflow.dag.needrun_jobs()):
        record_dag(workflow.dag.jobs, DAG_RECORD, exclude=("cost", "report", "all"), rule_name=name)


def _on_success(log=None):
    from circuitloc.plan.console import report_ready

    report_ready(targets.REPORT)


def _on_error(log=None):
    from circuitloc.plan.console import explain_failures

    explain_failures(log, since=_STARTED)


onstart:
    _on_start(log)


onsuccess:
    _on_success(log)


onerror:
    _on_error(log)


# Snakemake runs the handlers above for the main Snakefile only; used as a module (`use rule * from
# circuitloc`), they run before the caller's own (a caller's handler defined after its `use rule`
# replaces them: it may call circuitloc's in turn, see docs/configuration.md).
if not workflow.modifier.is_main_snakefile():
    from circuitloc.plan.dag import chain_handlers  # noqa: E402

    chain_handlers(workflow, start=_on_start, success=_on_success, error=_on_error)


rule all:
    default_target: True
    input:
        targets.all_outputs(config),
