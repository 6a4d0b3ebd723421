"""Checks of a config beyond its schema, each a one-line ConfigError naming the keys involved, so a
mistake stops the plan instead of a job minutes later: which tasks it names, and whether each task's
scoring prompts leave room for the rest."""

from __future__ import annotations

from circuitloc.errors import ConfigError
from circuitloc.plan import vocab


def selected_tasks(tasks: dict) -> dict:
    """The `tasks:` block less the tasks a layer removed with `tasks.<name>: null` (a config may run
    a subset of the tasks: the default's other tasks would merge in otherwise)."""
    return {name: block for name, block in tasks.items() if block is not None}


def check_task_names(tasks: dict) -> None:
    """Every key under `tasks:` is a task of the workflow (built in, or of a module named in
    task_modules), checked before the schema so that a misspelt task is not reported as a block
    lacking its required keys."""
    for name in tasks:
        try:
            spec = vocab.task(name)
        except ValueError:
            raise ConfigError(f"config: tasks.{name}: unknown task {name!r}: expected one of "
                              f"{', '.join(vocab.own_tasks())} (a task of your own: its module in "
                              f"task_modules)") from None
        if not spec.in_workflow or spec.base:
            raise ConfigError(f"config: tasks.{name}: not a task of its own (its settings are "
                              f"tasks.{spec.base or name})" if spec.base else
                              f"config: tasks.{name}: a helper task, not one the workflow scores")


def _size_keys(config: dict, task: str, model: str):
    """(n_score, n, the dotted key each comes from) of a task for a model (its override, else the
    run-wide value); n is None for a task whose size the data decide (facts: the known facts)."""
    own = config["models"][model].get("tasks", {}).get(task, {})
    run_wide = config["tasks"][task]

    def pick(key):
        if key in own:
            return own[key], f"models.{model}.tasks.{task}.{key}"
        return run_wide.get(key), f"tasks.{task}.{key}"

    return pick("n_score"), pick("n")


def check_sizes(config: dict) -> None:
    """A task's scoring prompts are fewer than its prompts: `n_score` above `n` can never be met,
    and `n_score` equal to `n` leaves no held-out prompt for the curves when curves.prompts is
    heldout (the paper's `all` scores and draws curves on the same prompts)."""
    for task in config["tasks"]:
        for model in config["models"]:
            (n_score, score_key), (n, n_key) = _size_keys(config, task, model)
            if n is None or n_score is None:
                continue
            prompts = {**config["curves"], **config["models"][model].get("curves", {})}.get("prompts")
            if n_score > n:
                raise ConfigError(f"config: {score_key} = {n_score} is more than {n_key} = {n}: a task cannot "
                                  f"score more prompts than it has")
            if n_score == n and prompts == "heldout":
                raise ConfigError(f"config: {score_key} = {n_score} equals {n_key} = {n}: with curves.prompts "
                                  f"heldout no prompt is left for the curves (lower n_score, or raise n)")
