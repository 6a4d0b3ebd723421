"""The registry of every task and ablation kind a run may name: the built-in ones
(circuitloc.plan.vocabulary.builtin_tasks, circuitloc.plan.vocabulary.vocab.BUILTIN_KINDS) and those of the modules a
config names under `task_modules:` (loaded lazily, from the environment variable the Snakefile sets
for its jobs). Lookups by name: an unknown name is an error, never a fallback. Standard library only."""

from __future__ import annotations

import importlib
import os
import re

from circuitloc.plan.vocabulary.builtin_tasks import BUILTIN
from circuitloc.plan.vocabulary.vocab import BUILTIN_KINDS, KIND_NAME, UNITS, KindSpec, TaskSpec, shared_spec

_KINDS: dict[str, KindSpec] = {k.name: k for k in BUILTIN_KINDS}
_TASKS: dict[str, TaskSpec] = {t.name: t for t in BUILTIN}
# modules outside circuitloc that define tasks or kinds (config `task_modules:`); the Snakefile sets it for jobs
TASK_MODULES_ENV = "CIRCUITLOC_TASK_MODULES"


def register_kind(spec: KindSpec) -> KindSpec:
    """Add a kind defined outside circuitloc (its module's `KIND`); a name may not be reused by a
    different spec."""
    if not KIND_NAME.match(spec.name):
        raise ValueError(f"ablation kind name {spec.name!r}: lowercase letters, digits and _ only (no '-')")
    old = _KINDS.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"ablation kind {spec.name!r} is already defined (builder {old.builder})")
    _KINDS[spec.name] = spec
    return spec


def kinds() -> tuple[str, ...]:
    """Every registered kind's name, built-in first (the configured modules' kinds loaded)."""
    load_task_modules()
    return tuple(_KINDS)


def kind(name: str) -> KindSpec:
    """The spec of a kind by name; kinds of configured modules are loaded on first use."""
    if name not in _KINDS:
        load_task_modules()
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown ablation kind {name!r}: expected one of {', '.join(_KINDS)} "
                         f"(a kind of your own: its module in config task_modules)") from None


def parse_ablation(name: str) -> tuple[str, str]:
    """'zero-query' -> (zero, query); 'mean-kv' -> (mean, kv); a bare kind means query heads. An
    unknown kind or unit is an error, never a fallback."""
    kind_name, _, unit = str(name).partition("-")
    unit = unit or "query"
    if kind_name not in _KINDS:
        load_task_modules()
    if kind_name not in _KINDS or unit not in UNITS:
        raise ValueError(f"unknown ablation {name!r}: expected {'|'.join(_KINDS)}-{'|'.join(UNITS)} "
                         f"(a kind of your own: its module in config task_modules)")
    return kind_name, unit


def ablation_name(kind_name: str, unit: str) -> str:
    parse_ablation(f"{kind_name}-{unit}")
    return f"{kind_name}-{unit}"


def ablation_pattern() -> str:
    """A Snakemake wildcard constraint matching every registered kind-unit (call it after the
    config's modules are loaded)."""
    return f"({'|'.join(map(re.escape, kinds()))})-({'|'.join(UNITS)})"


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task defined outside circuitloc (its module's `SPEC`), and its family-shared condition
    where it declares one; a name may not be reused by a different spec."""
    specs = [spec, shared_spec(spec)] if spec.shared else [spec]
    for s in specs:
        old = _TASKS.get(s.name)
        if old is not None and old != s:
            raise ValueError(f"task {s.name!r} is already defined (by {old.module})")
    _TASKS.update((s.name, s) for s in specs)
    return spec


def load_task_modules(names=None) -> list[str]:
    """Import the modules named (default: the environment's CIRCUITLOC_TASK_MODULES, comma-separated)
    and register what each defines: a task (`SPEC`, a TaskSpec), an ablation kind (`KIND`, a
    KindSpec), or both. Returns the names of the tasks and kinds they define."""
    if names is None:
        names = [n for n in os.environ.get(TASK_MODULES_ENV, "").split(",") if n.strip()]
    out = []
    for name in names:
        module = importlib.import_module(name.strip())
        spec, kind_spec = getattr(module, "SPEC", None), getattr(module, "KIND", None)
        if not isinstance(spec, TaskSpec) and not isinstance(kind_spec, KindSpec):
            raise ValueError(f"task module {name!r} has neither SPEC (a circuitloc.plan.vocabulary.vocab.TaskSpec) "
                             "nor KIND (a circuitloc.plan.vocabulary.vocab.KindSpec)")
        if isinstance(spec, TaskSpec):
            if spec.shared and not callable(getattr(module, "shared_dataset", None)):
                raise ValueError(f"task module {name!r}: SPEC.shared names a family-shared condition "
                                 f"({spec.shared!r}) but the module has no shared_dataset(model, frames, n_score)")
            out.append(register(spec).name)
        if isinstance(kind_spec, KindSpec):
            out.append(register_kind(kind_spec).name)
    return out


def task(name: str) -> TaskSpec:
    """The spec of a task by name; tasks of configured task modules are loaded on first use."""
    if name not in _TASKS:
        load_task_modules()
    try:
        return _TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}: expected one of {', '.join(sorted(_TASKS))} "
                         f"(a task of your own: its module in config task_modules)") from None


def dataset_inputs(name: str, cfg: dict, root: str) -> dict:
    """The files a dataset job of task `name` reads, by key (none for a task that reads none)."""
    spec = task(name)
    return spec.inputs(cfg, root) if spec.inputs else {}


def base_task(name: str) -> TaskSpec:
    """The task whose behaviour `name` uses (facts_shared: facts)."""
    spec = task(name)
    return task(spec.base) if spec.base else spec


def own_tasks() -> list[str]:
    """Every registered task a config may name under `tasks:` (not a derived or helper task)."""
    return [n for n, s in _TASKS.items() if s.in_workflow and not s.base]


def workflow_tasks(configured) -> list[str]:
    """The tasks a config asks for (keys of its `tasks:`), built-in order first, each checked."""
    names = list(configured)
    for n in names:
        spec = task(n)
        if not spec.in_workflow or spec.base:
            raise ValueError(f"config tasks.{n}: not a task of its own (use tasks.{spec.base or n})")
    builtin = [t.name for t in BUILTIN if t.name in names]
    return builtin + [n for n in names if n not in builtin]
