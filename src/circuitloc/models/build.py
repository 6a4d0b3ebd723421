"""The model stage: a model from its source (a toy trained here or stored, a GGUF file, a Hugging
Face id or directory) and its card, the facts every later stage reads about it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

from circuitloc.errors import ModelSourceError
from circuitloc.modelcard import ModelCard
from circuitloc.models.card import make_card, weights_record
from circuitloc.models.gguf import convert_gguf, fetch_gguf
from circuitloc.models.load import load_tokenizer, resolve_hf
from circuitloc.models.toy import train_toy
from circuitloc.plan.config.hub import snapshot_commit
from circuitloc.runner import log


def build_model(name: str, spec: dict, card_path, weights_dir, engine_of: Callable[[str], str]) -> ModelCard:
    """Build (or resolve) the model's weights and write its card. The card holds no timings (they go
    to the log; the rule's benchmark file has the job's), so identical weights give identical bytes.
    `engine_of`: the engine wing's word for an architecture (circuitloc.engine.select.engine_of),
    passed in by the caller so that the model stage imports nothing of the engine."""

    source = spec.get("source")
    t0 = perf_counter()
    extra = {}
    if source == "toy":

        spec = {"prepend_bos": True, **spec}  # toys are trained on rows that start with <bos>
        result = train_toy(dict(spec.get("toy", {})), weights_dir, log=log.info)
        log.info("model %s: toy trained in %s s (this machine's wall clock; not in the card)", name,
                 result.get("train_seconds"))
        path, extra = str(weights_dir), {"checks": result["checks"], "steps": result["steps"],
                                          "recipe": result.get("recipe")}
        if result.get("checkpoint"):
            extra["checkpoint"] = result["checkpoint"]
    elif source == "gguf":

        gguf = fetch_gguf(spec["gguf"], Path(weights_dir).parent / "download", name)
        convert_gguf(gguf, weights_dir)
        path, extra = str(weights_dir), {"gguf": str(gguf), "sha256": spec["gguf"].get("sha256")}
    elif source == "hf":

        path = resolve_hf(name, spec["hf"], spec.get("revision"))
        # the snapshot it came from: the commit (a local directory has none), and what was asked for
        extra = {"hf": spec["hf"], "revision": snapshot_commit(path), "revision_requested": spec.get("revision")}
    else:
        raise ModelSourceError(f"model {name!r}: unknown source {source!r} (expected toy, gguf or hf)")
    t_hash = perf_counter()
    extra["weights"] = weights_record(path)
    log.info("model %s: weights sha256 %s (%d files, %.0f MB, hashed in %.1f s)", name, extra["weights"]["sha256"],
             len(extra["weights"]["files"]), sum(f["bytes"] for f in extra["weights"]["files"].values()) / 1e6,
             perf_counter() - t_hash)
    card = make_card(name, spec, path, load_tokenizer(path), extra)
    card = dataclasses.replace(card, engine=engine_of(card.architecture))  # every job of this model scans with it
    card.write(card_path)
    shape = {k: getattr(card, k) for k in ("attention", "n_layers", "n_heads", "n_kv_heads", "engine")}
    log.info("model %s: %s; built in %.1f s", name, shape, perf_counter() - t0)
    return card
