# Glue between the rules and the plan. What the rules read from the config are plain functions of
# the prepared config (circuitloc.plan: views for models, tasks and ablations; targets for what a
# run makes and what each table reads; groups for how score and curve jobs are cut, named, ordered
# and resourced; inputs for the files no job writes and the code hash); the rules call them with
# this run's `config`. Nothing here changes the config.
from circuitloc.plan import paths  # noqa: E402  (no heavy imports)
from circuitloc.plan.config import views  # noqa: E402
from circuitloc.plan.config.sweep_toys import META as SWEEP_META  # noqa: E402
from circuitloc.plan.jobs import groups, inputs, targets  # noqa: E402
from circuitloc.plan.vocabulary import catalog as registry  # noqa: E402

MODELS = views.models(config)
TASKS = views.tasks(config)
ABLATIONS = views.ablations(config)
SWEEP_MODELS = views.sweep_models(config)
# one score rule and one curve rule per list of ablations that models share; with group_stages, one
# rule per list of tasks and ablations whose models run all their stages in one job (plan.jobs.groups)
ABLATION_GROUPS = groups.ablation_groups(config)
STAGE_GROUPS = groups.stage_groups(config)
# the DAG of the run that makes the cost table, as its cost job reads it (the Snakefile's onstart)
DAG_RECORD = ".snakemake/circuitloc/dag_jobs.json"


def kept(files):
    """`files` (an input: a pattern, a list, or an input function) with the card of a model rebuilt
    for weights a finished run lost read as ancient(): the rebuild writes the same card, so what
    reads it is not rerun for it (plan.jobs.weights)."""
    return LOST_WEIGHTS.keep(files, ancient)


# Code is a rerun trigger: each script rule has `code=code_version("<script>")` among its params
# (circuitloc.plan.jobs.codehash), so a change to the code a job runs reruns it and what follows.
def code_version(script):
    CHECKOUT.fetch(f"workflow/scripts/{script}")  # a remote Snakefile's script: hashed from its fetched text
    return inputs.code_version(ROOT, script)


def torch_params():
    """What every job that runs a model on ablations (score, curve, staged, specificity) is told beside
    its own params (`params: ..., **torch_params()`): the model's ablation options, the bootstrap,
    the token budget of a batch and the device."""
    return dict(
        opts=lambda wc: views.ablation_opts(config, wc.model),
        bootstrap=views.bootstrap_opts(config),
        batch_tokens=config["max_batch_tokens"],
        device=config["device"],
    )


def job_resources(stage, per_model=True):
    """A rule's `resources:` (**job_resources(stage)), estimated from the config (plan.jobs.resources)."""
    return groups.job_resources(config, stage, per_model)


def job_priority(stage, group_models=()):
    """A rule's `priority:`: long jobs first, so 2 cores stay busy to the end (plan.jobs.groups)."""
    return groups.job_priority(config, stage, group_models)


def table_outputs(name, ablations, label):
    """A per-task table job's outputs of one table (`name`: table1, table2) per ablation: the CSV, the
    HTML page the report shows, the Markdown."""

    def page(a):  # (a line here that starts with `report(` would read as the report directive)
        labels = {"output": label, "task": "{task}", "ablation": a}
        return report(
            paths.file(paths.PER_TASK_TABLES[name], "html", ablation=a),
            caption=f"../report/{name}.rst",
            category="{task}",
            subcategory=f"{a} ablation",
            labels=labels,
        )

    return {
        name: [paths.file(paths.PER_TASK_TABLES[name], "csv", ablation=a) for a in ablations],
        f"{name}_html": [page(a) for a in ablations],
        f"{name}_md": [paths.file(paths.PER_TASK_TABLES[name], "md", ablation=a) for a in ablations],
    }


wildcard_constraints:
    model=views.one_of(MODELS),
    task=views.one_of(views.dataset_tasks(config)),
    ablation=registry.ablation_pattern(),
