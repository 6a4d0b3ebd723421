"""Files a job reads that no other job writes: the checkout's resource files, a stored toy's files, a
local fahamu parquet, and the code a script runs (as a hash). Every file a result is computed from
is an input of the job that reads it, so editing it reruns exactly that job and what follows.

`root` is the checkout (the directory of the workflow's Snakefile), which need not be the working
directory: the workflow may be used as a module or run with `--directory`. Every path a rule
records is relative to the working directory, so a run directory that is moved or copied (with the
checkout beside it as before) plans nothing again."""

from __future__ import annotations

import os

from circuitloc.plan.vocabulary import builtin_tasks
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.jobs.checkpoints import checkpoint_files
from circuitloc.plan.jobs.codehash import code_hash
from circuitloc.plan.config.views import model_spec, task_config


def code_version(root, script) -> str:
    """The hash of a workflow script's code and every circuitloc module it imports (a rule's param,
    so a change to the code a job runs reruns it: circuitloc.plan.jobs.codehash)."""
    return code_hash(os.path.join(root, "workflow", "scripts", script))


def resource_path(root, *parts) -> str:
    """A file under the checkout's resources/, relative to the working directory."""
    return os.path.relpath(os.path.join(root, "resources", *parts))


def neutral_text(config, root) -> str:
    """The plain text of the specificity control (config `neutral_text`, else the shipped one)."""
    return config.get("neutral_text") or resource_path(root, "neutral.txt")


def dataset_inputs(config, root, wildcards) -> dict:
    """Named files a dataset job reads (`registry.dataset_inputs`: ioi: the 30 templates and a local
    fahamu parquet, or the generator's four IOI files; facts: the facts file; induction: none). A
    fahamu file from the hub is fetched inside the job, never at DAG-build time."""
    cfg = task_config(config, wildcards.task, wildcards.model)
    return registry.dataset_inputs(wildcards.task, cfg, resource_path(root))


def stage_inputs(config, root, tasks):
    """The input function of a job running a model's stages of `tasks` (`group_stages`): each
    task's dataset inputs, named `<task>__<name>` (engine.stages splits them again)."""

    def files(wildcards) -> dict:
        return {f"{t}__{k}": v for t in tasks
                for k, v in registry.dataset_inputs(t, task_config(config, t, wildcards.model), resource_path(root)).items()}

    return files


def model_inputs(config, root, wildcards) -> dict:
    """A toy model's vocabulary and training data come from the IOI resource files and the facts
    file, so it is rebuilt when they change (a stored checkpoint's files are inputs too); other
    sources read no resource file."""
    spec = model_spec(config, wildcards.model)
    if spec.get("source") != "toy":
        return {}
    recipe = spec.get("toy", {})
    ioi_dir = recipe.get("ioi_resources") or resource_path(root, "ioi")
    out = {k: os.path.join(ioi_dir, os.path.basename(f)) for k, f in builtin_tasks.IOI_RESOURCES.items()}
    out["facts"] = recipe.get("facts_path") or resource_path(root, builtin_tasks.FACTS_FILE)
    if recipe.get("checkpoint"):  # a stored toy: its files too (its held-out checks read the resources)
        out.update({f"checkpoint_{i}": f for i, f in enumerate(checkpoint_files(recipe["checkpoint"]))})
    return out
