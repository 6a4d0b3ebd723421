"""A task is a dataset plus a metric: what the engine needs to score it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import polars as pl
import torch

from ..errors import DatasetError
from ..scan import Prompts
from . import facts, induction, ioi
from .common import pad_right


@dataclass(frozen=True)
class Task:
    name: str
    metric_name: str
    metric: Callable
    higher_is_better: bool
    fields: tuple
    extra: dict = field(default_factory=dict)
    align: tuple = ()  # prompts equal in these columns (and in length) share token positions


def facts_task(metric: str = facts.DEFAULT_METRIC) -> Task:
    """The facts task ranked on `metric` (config `tasks.facts.metric`: margin, accuracy or logprob);
    the other two are computed beside it (`extra`), so accuracy stays a reported column."""
    if metric not in facts.METRICS:
        raise ValueError(f"tasks.facts.metric must be one of {', '.join(facts.METRICS)}, got {metric!r}")
    extra = {k: f for k, f in facts.METRICS.items() if k != metric}
    return Task("facts", metric, facts.METRICS[metric], True, ("answer_id",), extra, align=("domain", "relation"))


TASKS = {
    "ioi": Task("ioi", "ld", ioi.metric, True, ("io_id", "s_id"), align=("template",)),
    "induction": Task("induction", "icl_loss", induction.metric, False, ("b_id",),
                      align=("prefix_len", "suffix_len")),
    "facts": facts_task(),
    # plain next-token loss on a neutral text sample (windows of equal length; b_id = next token)
    "neutral": Task("neutral", "loss", induction.metric, False, ("b_id",), align=("length",)),
}


def task_of(name: str, metric: str | None = None) -> Task:
    """facts_shared is the facts task on a different row set. `metric`: the facts metric (config
    `tasks.facts.metric`; None: the default, margin); any other task has one metric, and a
    `metric` that names another is an error."""
    base = "facts" if name.startswith("facts") else name
    if base == "facts":
        return facts_task(metric or facts.DEFAULT_METRIC)
    task = TASKS[base]
    if metric is not None and metric != task.metric_name:
        raise ValueError(f"task {name} has the metric {task.metric_name}, not {metric!r}")
    return task


def floor_value(task: Task, vocab_size: int | None = None) -> float:
    """The metric with the task gone, where it is one number: 0 for the IOI logit difference, facts
    accuracy (no fact right) and the facts margin (the answer no longer beats its best rival: the
    point where top-1 accuracy flips); -log(vocabulary size) for the facts log-probability (a
    uniform guess). Induction's floor is per prompt (the no-repeat loss), computed by the job."""
    if task.metric_name == "logprob":
        if not vocab_size:
            raise ValueError("the facts logprob floor needs the vocabulary size")
        return -float(np.log(vocab_size))
    return 0.0


def metric_of(frame: pl.DataFrame, task_name: str) -> str | None:
    """The metric a scores or curve table was computed with (its `metric` column; None, the task's
    default, for a table without one)."""
    if "metric" in frame.columns and len(frame):
        return str(frame["metric"][0])
    return None


def prompts(df: pl.DataFrame, task: Task, pad: int, column: str = "input_ids") -> Prompts:
    ids, last = pad_right(df[column].to_list(), pad)
    fields = {f: torch.tensor(df[f].to_numpy(), dtype=torch.long) for f in task.fields}
    return Prompts(ids, last, fields)


def build_dataset(task_name: str, tokenizer, prepend_bos: bool, cfg: dict, seed: int, inputs: dict | None = None,
                  form: str = "natural", last_logits: Callable | None = None):
    """A task's dataset for one model, with its scoring rows marked: (rows, counts of what each
    filter removed). `inputs`: the resource files the rule declares; facts needs `form` (natural or
    qa) and `last_logits(rows)`, the model's clean last-position logits (its knowledge filter)."""
    inputs = inputs or {}
    if task_name == "ioi":
        return ioi.build_dataset(tokenizer, prepend_bos, cfg, seed, inputs)
    if task_name == "induction":
        return induction.build_dataset(tokenizer, prepend_bos, cfg, seed)
    if task_name == "facts":
        return facts.build_dataset(tokenizer, prepend_bos, cfg, seed, form, last_logits, inputs.get("facts"))
    raise DatasetError(f"unknown task {task_name!r}")
