# circuitloc: how concentrated are the attention-head circuits of language models?
# Stages: models -> datasets -> scores -> curves -> tables / figures (see README).
import os
import sys

from snakemake.utils import min_version

min_version("9.0")


# The checkout holding this Snakefile: not the working directory (--directory), nor the caller's
# directory when the workflow is used as a module. A Snakefile read from a URL has no local checkout:
# the files the plan reads are fetched from beside it into a local mirror (circuitloc.plan.config.source),
# and circuitloc must be installed.
# Without it (a remote Snakefile, as snakedeploy's module reads it, where only Snakemake is
# installed), planning stops at one line naming what to install.
BASEDIR = workflow.current_basedir
if BASEDIR.is_local:
    sys.path.insert(0, os.path.join(BASEDIR.get_path_or_uri(secret_free=True), "src"))
try:
    from circuitloc.plan.config.source import Checkout  # noqa: E402  (no heavy imports)
    import circuitloc.plan.config.workflow_config  # noqa: E402  (what the plan imports beside Snakemake's)
except ImportError as e:
    sys.exit(
        f"circuitloc: cannot import {e.name!r}: install the circuitloc package and its dependencies into "
        f"the Python that runs Snakemake ({sys.executable}): "
        + (
            f"pip install -e {BASEDIR.get_path_or_uri(secret_free=True)}"
            if BASEDIR.is_local
            else f"pip install 'git+https://{getattr(BASEDIR, 'host', 'github.com')}/"
            f"{getattr(BASEDIR, 'repo', '<owner>/circuitloc')}@{getattr(BASEDIR, 'ref', '<tag>')}'"
        )
    )

CHECKOUT = Checkout(workflow)
ROOT = CHECKOUT.root
# Without --use-conda (or a container) the jobs run in this Python: a dependency it lacks stops the
# plan with one line, not every job later (plan.config.install).
DEPLOYED_BY = getattr(workflow.deployment_settings, "deployment_method", None)
if getattr(workflow, "is_main_process", True) and not DEPLOYED_BY:
    from circuitloc.plan.config.install import missing_line  # noqa: E402

    if missing_line(ROOT, sys.executable):
        sys.exit(missing_line(ROOT, sys.executable))
from circuitloc.errors import ConfigError  # noqa: E402
from circuitloc.plan.config.workflow_config import prepare  # noqa: E402

# The embedded default always loads; the working directory's config/config.yaml (away from the
# checkout: `--directory .test`), or a module caller's `configfile:` files, then every --configfile,
# then --config k=v, merge onto it, each read as its own layer (plan.config.layers: Snakemake's own merge
# would mix their models), recursively; a layer's own `models:` replaces the models below it, so two
# configs' models never mix. An unknown key anywhere is an error naming its path; then the schema.
try:
    prepare(config, workflow, ROOT)
except ConfigError as e:  # one line per problem, without a traceback
    sys.exit(str(e))

# A toy's or GGUF model's weights folder deleted, or a file deleted or truncated inside it (which
# Snakemake does not look into): a plain rerun rebuilds the model (rule model_rebuilt) and reruns
# what reads its card only if the card changes (plan.jobs.weights).
from circuitloc.plan.jobs.weights import LostWeights  # noqa: E402

LOST_WEIGHTS = LostWeights(workflow, config)

# The report opens on the run's answer once the run has written it (rule landing), else on the
# workflow's description.
from circuitloc.plan.hooks.html_report import report_text  # noqa: E402


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


# onstart, onsuccess, onerror (plan.hooks.handlers): what the run says when it starts and how it ends,
# and the DAG record the cost table reads. Snakemake runs them for the main Snakefile only; used as a
# module (`use rule * from circuitloc`), they run before the caller's own (a caller's handler defined
# after its `use rule` replaces them: it may call circuitloc's in turn, see docs/configuration.md).
from circuitloc.plan.hooks.handlers import Handlers  # noqa: E402

HANDLERS = Handlers(workflow, config, DAG_RECORD, targets.REPORT)


onstart:
    HANDLERS.start(log)


onsuccess:
    HANDLERS.success(log)


onerror:
    HANDLERS.error(log)


if not workflow.modifier.is_main_snakefile():
    from circuitloc.plan.hooks.dag import chain_handlers  # noqa: E402

    chain_handlers(workflow, start=HANDLERS.start, success=HANDLERS.success, error=HANDLERS.error)


rule all:
    default_target: True
    input:
        targets.all_outputs(config),
        LOST_WEIGHTS.markers(),  # a model whose weights were lost: rule model_rebuilt's marker
