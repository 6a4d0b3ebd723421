"""A task is a dataset plus a metric: what the engine needs to score it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

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


TASKS = {
    "ioi": Task("ioi", "ld", ioi.metric, True, ("io_id", "s_id"), align=("template",)),
    "induction": Task("induction", "icl_loss", induction.metric, False, ("b_id",),
                      align=("prefix_len", "suffix_len")),
    "facts": Task("facts", "accuracy", facts.metric, True, ("answer_id",), {"logprob": facts.logprob},
                  align=("domain", "relation")),
    # plain next-token loss on a neutral text sample (windows of equal length; b_id = next token)
    "neutral": Task("neutral", "loss", induction.metric, False, ("b_id",), align=("length",)),
}


def task_of(name: str) -> Task:
    """facts_shared is the facts task on a different row set."""
    return TASKS["facts" if name.startswith("facts") else name]


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
