"""Checks of a config beyond its schema, each a one-line ConfigError naming the keys involved, so a
mistake stops the plan instead of a job minutes later: which tasks it names, and whether each task's
scoring prompts leave room for the rest."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.config.views import scores_block


def selected_tasks(tasks: dict) -> dict:
    """The `tasks:` block less the tasks a layer removed with `tasks.<name>: null` (a config may run
    a subset of the tasks: the default's other tasks would merge in otherwise)."""
    return {name: block for name, block in tasks.items() if block is not None}


def check_task_names(tasks: dict, where: str = "tasks") -> None:
    """Every key under `tasks:` (or a model's `where` = models.<m>.tasks) is a task of the workflow
    (built in, or of a module named in task_modules), checked before the schema so that a misspelt
    task is not reported as a block lacking its required keys, or as an unknown key."""
    for name in tasks:
        try:
            spec = registry.task(name)
        except ValueError:
            known = registry.own_tasks()
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"config: {where}.{name}: unknown task {name!r}{hint}: expected one of "
                              f"{', '.join(known)} (a task of your own: its module in task_modules)") from None
        if not spec.in_workflow or spec.base:
            raise ConfigError(f"config: {where}.{name}: not a task of its own (its settings are "
                              f"{where}.{spec.base or name})" if spec.base else
                              f"config: {where}.{name}: a helper task, not one the workflow scores")


def _model_task_blocks(models):
    """(model, its spec, its `tasks:` mapping) for every model of the config that gives one."""
    for model, spec in (models or {}).items() if isinstance(models, dict) else ():
        own = spec.get("tasks") if isinstance(spec, dict) else None
        if isinstance(own, dict):
            yield model, spec, own


def take_left_out(models) -> dict:
    """Take every `models.<m>.tasks.<task>: null` (the model leaves that task out) out of the models
    before the schema sees them, which knows a task's block only as a mapping, after checking each
    name a model's `tasks:` gives: model -> [tasks it leaves out]. `put_back_left_out` restores them
    once the config is validated."""
    out = {}
    for model, spec, own in _model_task_blocks(models):
        check_task_names(own, f"models.{model}.tasks")
        if gone := [t for t, block in own.items() if block is None]:
            out[model] = gone
            spec["tasks"] = {t: block for t, block in own.items() if block is not None}
    return out


RUN_WIDE_TASK_KEYS = ("shared",)  # read from tasks.<task> alone: a model's copy would be ignored


def check_run_wide_task_keys(models) -> None:
    """A model's `tasks.<task>` may override the task's settings for that model, except the keys the
    whole run reads once (the family-shared condition is made of every member of a family): set
    there, they would be silently ignored."""
    for model, _, own in _model_task_blocks(models):
        for task, block in own.items():
            for key in RUN_WIDE_TASK_KEYS if isinstance(block, dict) else ():
                if key in block:
                    raise ConfigError(f"config: models.{model}.tasks.{task}.{key}: a setting of the whole run, "
                                      f"not of one model: set tasks.{task}.{key} instead")


def put_back_left_out(config: dict, left_out: dict) -> None:
    """The nulls `take_left_out` took, back in their models' `tasks:` (plan.config.views.runs reads them);
    a model that leaves out every task the run has is an error (drop it from models: instead)."""
    for model, gone in left_out.items():
        config["models"][model].setdefault("tasks", {}).update(dict.fromkeys(gone))
        if set(config["tasks"]) <= set(gone):
            raise ConfigError(f"config: models.{model}.tasks: leaves out every task of the run "
                              f"({', '.join(config['tasks'])}): remove the model instead")


def _size_keys(config: dict, task: str, model: str):
    """(n_score, n, the dotted key each comes from) of a task for a model (its override, else the
    run-wide value); n is None for a task whose size the data decide (facts: the known facts)."""
    own = (config["models"][model].get("tasks", {}).get(task) or {}) if model else {}
    run_wide = config["tasks"][task]

    def pick(key):
        if key in own:
            return own[key], f"models.{model}.tasks.{task}.{key}"
        return run_wide.get(key), f"tasks.{task}.{key}"

    return pick("n_score"), pick("n")


def _leaves(layer, prefix: str = "") -> set[str]:
    """The dotted key of every value a config layer writes (a mapping's own keys included)."""
    out = set()
    for key, value in (layer or {}).items() if isinstance(layer, dict) else ():
        out.add(f"{prefix}{key}")
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
    return out


@dataclass(frozen=True)
class Provenance:
    """Which keys of a run's config the user wrote (its --configfile and --config layers) and which
    the embedded default config wrote: an error blames a key the user wrote and says where the value
    it conflicts with comes from."""

    written: frozenset = frozenset()
    default: frozenset = frozenset()

    @classmethod
    def of(cls, default: dict, layers) -> Provenance:
        written = set()
        for layer in layers:
            written |= _leaves(layer)
        return cls(frozenset(written), frozenset(_leaves(default)))

    def blames(self, key: str, other: str) -> bool:
        """`key` is the one to blame rather than `other`: the user wrote it and not `other`."""
        return key in self.written and other not in self.written

    def origin(self, key: str) -> str:
        """Where a value the user did not write comes from."""
        if key not in self.default:
            return "the schema's default"
        m = re.fullmatch(r"models\.(.+)\.tasks\.(\w+)\.(\w+)", key)
        if m:
            return f"the default config's override of {m[3]} for {m[1]} (config/config.yaml)"
        return "the default config's value (config/config.yaml)"


def check_sizes(config: dict, provenance: Provenance | None = None) -> None:
    """A task's scoring prompts are fewer than its prompts: `n_score` above `n` can never be met,
    and `n_score` equal to `n` leaves no held-out prompt for the curves when curves.prompts is
    heldout (the paper's `all` scores and draws curves on the same prompts). The error names the
    key the user wrote (`provenance`) and where the other value comes from."""
    provenance = provenance or Provenance()
    for task in config["tasks"]:
        for model in (None, *config["models"]):  # None: the run-wide values, which the user may have written
            spec = config["models"].get(model) or {}
            if (spec.get("tasks") or {}).get(task, {}) is None:
                continue  # the model leaves the task out
            (n_score, score_key), (n, n_key) = _size_keys(config, task, model)
            if n is None or n_score is None:
                continue
            prompts = {**config["curves"], **spec.get("curves", {})}.get("prompts")
            if n_score < n or (n_score == n and prompts != "heldout"):
                continue
            if provenance.blames(n_key, score_key):
                relation = "is less than" if n_score > n else "equals"
                why = ("a task cannot score more prompts than it has" if n_score > n else
                       "with curves.prompts heldout no prompt is left for the curves")
                raise ConfigError(f"config: {n_key} = {n} {relation} {score_key} = {n_score}, "
                                  f"{provenance.origin(score_key)}: {why} (raise n, or set {score_key})")
            if n_score > n:
                raise ConfigError(f"config: {score_key} = {n_score} is more than {n_key} = {n}: a task cannot "
                                  f"score more prompts than it has")
            raise ConfigError(f"config: {score_key} = {n_score} equals {n_key} = {n}: with curves.prompts "
                              f"heldout no prompt is left for the curves (lower n_score, or raise n)")


def check_sweep_primary(config: dict) -> None:
    """The sweep's primary kinds are kinds the sweep runs: a primary family under a kind with no
    tables would be empty, and every verdict silently exploratory."""
    sweep = config.get("sweep") or {}
    kinds = (sweep.get("primary") or {}).get("kinds")
    if not sweep or not kinds:
        return
    ran = set((sweep.get("model") or {}).get("ablation", {}).get("kinds") or config["ablation"]["kinds"])
    missing = [k for k in kinds if k not in ran]
    if missing:
        raise ConfigError(f"config: sweep.primary.kinds: {', '.join(missing)} not among the sweep's ablation kinds "
                          f"({', '.join(sorted(ran))}; ablation.kinds)")


# Every curve key that ends a curve early once its damage reaches a value: a curve stopped below the
# threshold could miss its heads-to-threshold (the greedy search's stop and the ranked curve's)
STOP_KEYS = ("greedy_stop_damage", "ranked_stop_damage")


def stop_problem(cfg: dict, where: str | Callable[[str], str] = "curves") -> str | None:
    """Why a curve block's early stop (any of `STOP_KEYS`) is refused, or None: each must be at least
    its threshold (and the greedy may not be both screened and guided). `where`: the block a key is set in (a name, or key -> name). The one check of
    every stop key, for the plan (`check_stops`, run-wide and per model) and for a curve job's
    settings (engine.settings)."""
    block = where if callable(where) else (lambda _key: where)
    threshold = cfg.get("threshold")
    for key in STOP_KEYS:
        stop = cfg.get(key)
        if stop is not None and threshold is not None and float(stop) < float(threshold):
            return (f"{block(key)}.{key} = {stop} is below {block('threshold')}.threshold = {threshold}: "
                    "a curve stopped there could miss its heads-to-threshold")
    if cfg.get("greedy_screen") is not None and cfg.get("greedy_guided") is not None:  # the greedy's two shortcuts
        return (f"{block('greedy_screen')}.greedy_screen and {block('greedy_guided')}.greedy_guided are both set: "
                "a greedy step is screened on a subsample or guided by attribution, not both (set one to null)")
    return None


def check_stops(config: dict) -> None:
    """Every early stop of the curves, run-wide and each model's (its `curves:` over the run's), is at
    least its threshold (`stop_problem`); the error names the block each of the two keys comes from."""
    for model in (None, *config["models"]):
        own = ((config["models"].get(model) or {}).get("curves") or {}) if model else {}
        problem = stop_problem({**config["curves"], **own},
                               lambda key, own=own, model=model: f"models.{model}.curves" if key in own else "curves")
        if problem:
            raise ConfigError(f"config: {problem}")


def min_audit(level: float) -> int:
    """The fewest audited units m whose split-conformal quantile at `level` is finite: the
    ceil((1 - level)(m + 1))-th smallest of m residuals exists only for m >= 1/level - 1."""
    m = 1
    while math.ceil((1 - level) * (m + 1) - 1e-9) > m:
        m += 1
    return m


def check_scores(config: dict) -> None:
    """scores.audit (run-wide or a model's) is enough for scores.level: with fewer audited units the
    guided scan's conformal bound is infinite (every unit would be scored, with no saving)."""
    for model in (None, *config["models"]):
        b = scores_block(config, model)
        need = min_audit(float(b["level"]))
        if b["method"] == "guided" and int(b["audit"]) < need:
            where = f"models.{model}.scores" if model else "scores"
            raise ConfigError(f"config: {where}.audit = {b['audit']} is below {need}, the fewest audited units at "
                              f"which scores.level = {b['level']} gives a finite bound (1/level - 1)")
