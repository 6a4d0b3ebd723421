"""A task is its spec (circuitloc.plan.vocabulary.vocab.TaskSpec: names, columns, floors, splits, as data) plus its module's
behaviour. The interface a task module offers:

- `METRICS`: {metric name: fn(last_logits, batch) -> per-prompt values} for every name in the spec;
- `build_dataset(tokenizer, prepend_bos, cfg, seed, **context) -> (rows, filter counts)`, where the
  context holds `inputs` (the resource files the rule declares), `form` (natural | qa) and
  `last_logits(rows)` (the model's clean last-position logits); a builder takes what it needs;
- optionally `floor_per_prompt(job)`, for a spec whose floor is `per_prompt`, and
  `unit_columns(job) -> DataFrame on (layer, head)`, more columns for the scores table.

Nothing outside tasks/ decides by a task's name: every difference is in the spec or the module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

import numpy as np
import polars as pl
import torch

from circuitloc.errors import DatasetError
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary import vocab


@dataclass(frozen=True)
class Task:
    spec: vocab.TaskSpec
    metric_name: str
    metric: Callable
    extra: dict = field(default_factory=dict)  # the task's other metrics, reported beside the ranked one
    module: ModuleType | None = None

    def __getattr__(self, name):
        """The spec's fields (name, higher_is_better, fields, align, ...) read as the task's own."""
        if name == "spec":  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.spec, name)


def task_of(name: str, metric: str | None = None) -> Task:
    """The task `name` ranked on `metric` (config `tasks.<task>.metric`; None: the spec's default);
    its other metrics are computed beside it (`extra`). A metric the task lacks is an error."""
    spec = registry.task(name)
    chosen = spec.metric(metric)
    module = importlib.import_module(registry.base_task(name).module)
    metrics = module.METRICS
    missing = [m for m in spec.metrics if m not in metrics]
    if missing:
        raise ValueError(f"task {name}: its module {module.__name__} has no metric {missing}")
    extra = {k: metrics[k] for k in spec.metrics if k != chosen}
    return Task(spec, chosen, metrics[chosen], extra, module)


def floor_value(task: Task, vocab_size: int | None = None) -> float:
    """The metric with the task gone, where it is one number (the spec's floor kind): 0 (`zero`: an
    IOI logit difference, accuracy, the facts margin) or -log(vocabulary size) (`log_vocab`: a
    uniform guess). A `per_prompt` floor is the task module's `floor_per_prompt(job)`."""
    kind = task.spec.floor(task.metric_name)
    if kind == vocab.FLOOR_LOG_VOCAB:
        if not vocab_size:
            raise ValueError(f"the {task.name} {task.metric_name} floor needs the vocabulary size")
        return -float(np.log(vocab_size))
    if kind == vocab.FLOOR_ZERO:
        return 0.0
    raise ValueError(f"task {task.name}: the floor of {task.metric_name} is {kind!r}: per prompt, not one number")


def floor_per_prompt(task: Task, job) -> np.ndarray:
    """The floor for each of the job's prompts, so that a bootstrap resamples a ratio's denominator
    with its numerator."""
    if task.spec.floor(task.metric_name) == vocab.FLOOR_PER_PROMPT:
        return task.module.floor_per_prompt(job)
    vocab_size = None
    if task.spec.floor(task.metric_name) == vocab.FLOOR_LOG_VOCAB and len(job.prompts):
        vocab_size = int(job.scanner.last_logits(job.prompts.take(torch.arange(1))).shape[-1])
    return np.full(len(job.df), floor_value(task, vocab_size))


def unit_columns(task: Task, job) -> pl.DataFrame | None:
    """More per-unit columns of the scores table, where the task's module has them (induction: the
    attention to B)."""
    fn = getattr(task.module, "unit_columns", None)
    return fn(job) if fn else None


def dataset_columns(task_name: str) -> tuple:
    """The columns a score or curve job reads from a task's dataset."""
    spec = registry.task(task_name)
    return ("input_ids", "score", *spec.fields, *spec.job_columns)


def build_dataset(task_name: str, tokenizer, prepend_bos: bool, cfg: dict, seed: int, **context):
    """A task's dataset for one model, with its scoring rows marked: (rows, counts of what each
    filter removed). `context`: inputs, form and last_logits (see the module docstring)."""
    spec = registry.task(task_name)
    if not spec.in_workflow or spec.base:
        raise DatasetError(f"task {task_name!r} has no dataset builder of its own")
    module = importlib.import_module(spec.module)
    return module.build_dataset(tokenizer, prepend_bos, cfg, seed, **context)


# the built-in tasks under their default metrics (engine tests and benches take them from here)
TASKS = {name: task_of(name) for name in ("ioi", "induction", "facts", "neutral")}
