"""A stored toy instead of training one: copied, then checked on held-out prompts on this machine.
Training over many steps drifts apart across CPUs (float summation order); stored weights give
every machine the same model to score."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import torch
from transformers import Qwen2ForCausalLM

from circuitloc.errors import ToyTrainingError
from circuitloc.io import atomic_dir, writing
from circuitloc.models.load import load_tokenizer
from circuitloc.models.toy.corpus import training_ioi
from circuitloc.models.toy.evaluation import Evaluator, verdict
from circuitloc.models.toy.recipe import resolve_spec
from circuitloc.plan.jobs.checkpoints import CHECKPOINT_FILES, checkpoint_files
from circuitloc.tasks import ioi as ioi_task

# What a checkpoint's recipe fixes: a spec that names one of these must agree with it.
CHECKPOINT_FIXED = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_mlp", "rope_theta", "max_len", "seed",
                    "steps", "batch", "lr", "warmup", "weight_decay", "betas", "clip", "loss", "mix", "repeat_len",
                    "pool_size", "n_facts", "facts_path", "ioi_resources")


def _read(ck: Path) -> tuple[dict, dict, pl.DataFrame]:
    """(toy_checks.json, its recipe, the taught facts) of the checkpoint directory `ck`."""
    missing = [f for f in checkpoint_files(ck) if not Path(f).is_file()]
    if missing:
        raise ToyTrainingError(f"toy checkpoint {ck}: missing {', '.join(Path(f).name for f in missing)} "
                               "(expected a directory written by the toy source)")
    try:
        stored = json.loads((ck / "toy_checks.json").read_text())
        recipe = stored["recipe"]
        taught = pl.DataFrame(json.loads((ck / "toy_facts.json").read_text())["facts"])
    except (ValueError, KeyError, TypeError) as e:
        raise ToyTrainingError(f"toy checkpoint {ck}: toy_checks.json or toy_facts.json unreadable "
                               f"({type(e).__name__}: {e})") from e
    return stored, recipe, taught


def _recipe(spec: dict, ck: Path, recipe: dict) -> dict:
    """The stored recipe's fixed keys under the spec's other keys (evaluation, acceptance), resolved;
    a spec that contradicts a fixed key is refused."""
    for k in CHECKPOINT_FIXED:
        if k in spec and spec[k] != recipe.get(k):
            raise ToyTrainingError(f"toy checkpoint {ck}: toy.{k} = {spec[k]!r} but the checkpoint was "
                                   f"trained with {recipe.get(k)!r}; drop toy.{k} or use another checkpoint")
    return resolve_spec({**{k: recipe[k] for k in CHECKPOINT_FIXED if k in recipe},
                         **{k: v for k, v in spec.items() if k != "checkpoint"}})


def from_checkpoint(spec: dict, out_dir, log=print) -> dict:
    """The toy stored in `spec["checkpoint"]` (a directory that train_toy wrote), rechecked here and
    copied to `out_dir`."""
    ck = Path(spec["checkpoint"])
    stored, recipe, taught = _read(ck)
    s = _recipe(spec, ck, recipe)
    ioi_res = ioi_task.load_resources(s["ioi_resources"])
    tok = load_tokenizer(str(ck))
    model = Qwen2ForCausalLM.from_pretrained(ck, dtype=torch.float32).eval()
    evaluator = Evaluator(s, tok, ioi_res, taught, set(training_ioi(s, ioi_res)["prompt"]))
    v = verdict(evaluator(model), s["acceptance"])
    log(f"toy checkpoint {ck} checks (held-out, this machine): " + v.summary + f" -> {v.word}")
    if not v.passed and s["acceptance"].get("enforce", True):
        raise ToyTrainingError(f"toy checkpoint {ck} failed its held-out checks: " + v.summary
                               + ". Nothing was written to " + str(out_dir) + ".")
    with writing(out_dir), atomic_dir(out_dir) as tmp:
        for f in CHECKPOINT_FILES:
            shutil.copy2(ck / f, tmp / f)
    return {"checks": v.checks, "train_seconds": stored.get("train_seconds"), "steps": int(s["steps"]),
            "recipe": s, "checkpoint": str(ck)}
