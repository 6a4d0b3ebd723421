"""The dataset stage: each task's prompts for one model (built by the task's module) with the row
counts each filter removed, and the datasets of family-shared conditions."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from circuitloc import io
from circuitloc.engine.job import engine_label
from circuitloc.engine.settings import JobSettings
from circuitloc.errors import DatasetError
from circuitloc.engine.select import scanner_for
from circuitloc.models.load import load_engine, load_tokenizer
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.runner import log
from circuitloc.tasks.common import drop_over_context, mark_scoring, pad_id
from circuitloc.tasks.common import prompts as to_prompts
from circuitloc.tasks.registry import build_dataset as task_dataset
from circuitloc.tasks.registry import task_of


def build_dataset(job: JobSettings, cfg: dict, inputs: dict | None, out_parquet, out_filter, loaded=None):
    """A task's dataset for one model (`tasks.registry.build_dataset`) and the row counts each filter
    removed. `cfg`: the task's dataset config; `inputs`: the resource files the rule declares
    (ioi_templates, ioi_names, ..., or ioi_templates and fahamu, facts); the job reads exactly those
    (None: the shipped resources and the configured paths). `loaded`: a (model, tokenizer) the
    job already holds. The model itself is loaded only for a task that asks for its logits (facts'
    knowledge filter): IOI and induction need the tokenizer alone, and loading a model (importing
    its modelling code, reading and checking its weights) is most of a small model's dataset job."""

    task_name, card = job.task, job.card
    held = loaded
    tok = loaded[1] if loaded else load_tokenizer(card.path)

    def last_logits(rows):  # facts: the model's clean logits, for its knowledge filter
        nonlocal held
        held = held or load_engine(card, job.device)
        scanner = scanner_for(card, held, job.batch_tokens, job.device, card.engine)
        scanner.label = engine_label(card, task_name, engine=scanner.engine)
        return scanner.last_logits(to_prompts(rows, task_of(task_name), pad_id(tok)))

    limit = context_limit(card.path)
    df, counts = task_dataset(task_name, tok, card.prepend_bos, cfg, job.seed, inputs=inputs,
                              form=card.facts_form, last_logits=last_logits, context_len=limit,
                              model=card.name)
    n = len(df)  # a task module that did not drop them itself: dropped here, the scoring rows marked again
    df = drop_over_context(df, limit, counts, f"{task_name}/{card.name}")
    if len(df) < n and "score" in df.columns and cfg.get("n_score") is not None:
        df = mark_scoring(df, int(cfg["n_score"]))
        counts["kept"] = len(df)
    if len(df) == 0:
        raise DatasetError(f"{task_name}/{card.name}: no rows survive the filters: {counts}")
    if len(df) < int(cfg.get("n", 0) or 0):
        log.warning("%s/%s: only %d rows after filtering (asked for %s)", task_name, card.name, len(df), cfg["n"])
    io.write_parquet(df, out_parquet)
    io.write_json({"task": task_name, "model": card.name, **counts}, out_filter)
    log.info("%s/%s: %s", task_name, card.name, counts)


def context_limit(path) -> int | None:
    """The most positions the model at `path` takes, from its config.json (None where it names none)."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"):
        for block in (cfg, cfg.get("text_config") or {}):
            if isinstance(block.get(key), int) and block[key] > 0:
                return int(block[key])
    return None


def build_shared(task_name: str, model: str, member_paths: dict, n_score: int, out_parquet, out_filter):
    """A family-shared condition's dataset for one model: the prompts of its base task that every
    model of the family has (the base task module's `shared_dataset`), from the members' datasets."""
    base = registry.base_task(task_name)
    frames = {m: io.read_parquet(p, (), f"{base.name} dataset") for m, p in member_paths.items()}
    df, counts = importlib.import_module(base.module).shared_dataset(model, frames, n_score)
    io.write_parquet(df, out_parquet)
    io.write_json({"task": task_name, "model": model, **counts}, out_filter)
