"""The `toy` model source: a small Qwen2 model trained from scratch, on one CPU thread, on a
synthetic corpus of the three tasks (IOI sentences, repeated random-token sequences, fact
statements), then checked on held-out prompts before it is accepted.

    result = train_toy(spec, out_dir, log=print)

`spec` is the model's config block (see DEFAULTS for every key and its default). The MHA/GQA
controlled pair is two specs that differ only in `n_kv_heads`: same vocabulary, data stream,
seed, steps and, for every parameter of the same shape, the same initial weights.

The modules: `recipe` (DEFAULTS, resolve_spec), `tokenizer` (the word-level vocabulary), `model`
(architecture and initialisation), `corpus` (taught facts, the training stream), `evaluation`
(held-out checks, the acceptance gate), `training` (optimizer, loop, output directory) and
`checkpoint` (a stored toy instead of a trained one).

Output directory (written atomically): model.safetensors + config.json (fp32, tied embeddings),
tokenizer.json + tokenizer_config.json (word level; load with circuitloc.models.load.load_tokenizer),
toy_facts.json (the taught facts), toy_checks.json (checks, recipe, timing, training log).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from circuitloc import kernels
from circuitloc.models.toy.checkpoint import from_checkpoint
from circuitloc.models.toy.corpus import Corpus, select_facts
from circuitloc.models.toy.evaluation import Evaluator, judge
from circuitloc.models.toy.model import build_model
from circuitloc.models.toy.recipe import DEFAULTS, resolve_spec
from circuitloc.models.toy.tokenizer import build_tokenizer, pseudo_words
from circuitloc.models.toy.training import optimizer, train

# what callers outside the package use (models/build.py, bench/, tests/); the rest from its module
__all__ = ["DEFAULTS", "Corpus", "Evaluator", "build_model", "build_tokenizer", "judge", "optimizer",
           "pseudo_words", "resolve_spec", "select_facts", "train_toy"]


def train_toy(spec: dict, out_dir, log=print) -> dict:
    """Train the toy `spec` describes (or copy its `checkpoint`) into `out_dir`; its checks, recipe
    and timing. Torch's thread count and global generator are as before when it returns."""
    if spec.get("checkpoint"):
        return from_checkpoint(spec, out_dir, log)
    s = resolve_spec(spec)
    kernels.check(s["kernels"])  # pinned: set before torch was imported, else a clear error
    old_threads = torch.get_num_threads()
    torch.set_num_threads(int(s["threads"]))
    try:
        with torch.random.fork_rng(devices=[]), \
                (kernels.deterministic() if s["kernels"] == "pinned" else contextlib.nullcontext()):
            return train(s, Path(out_dir), log)
    finally:
        torch.set_num_threads(old_threads)
