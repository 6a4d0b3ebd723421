"""The model stage: a model from its source (a toy trained here or stored, a GGUF file, a Hugging
Face id or directory) and its card, the facts every later stage reads about it."""

from __future__ import annotations

import time
from pathlib import Path

from .. import io
from ..errors import ModelSourceError
from ..runner import log


def build_model(name: str, spec: dict, card_path, weights_dir) -> dict:
    from .card import make_card
    from .load import load_tokenizer, resolve_hf

    source = spec.get("source")
    t0 = time.time()
    extra = {}
    if source == "toy":
        from .toy import train_toy

        spec = {"prepend_bos": True, **spec}  # toys are trained on rows that start with <bos>
        result = train_toy(dict(spec.get("toy", {})), weights_dir, log=log.info)
        path, extra = str(weights_dir), {"checks": result["checks"], "train_seconds": result["train_seconds"],
                                          "steps": result["steps"], "recipe": result.get("recipe")}
        if result.get("checkpoint"):
            extra["checkpoint"] = result["checkpoint"]
    elif source == "gguf":
        from .gguf import convert_gguf, fetch_gguf

        gguf = fetch_gguf(spec["gguf"], Path(weights_dir).parent / "download", name)
        convert_gguf(gguf, weights_dir)
        path, extra = str(weights_dir), {"gguf": str(gguf), "sha256": spec["gguf"].get("sha256")}
    elif source == "hf":
        from ..hub import snapshot_commit

        path = resolve_hf(name, spec["hf"], spec.get("revision"))
        # the snapshot it came from: the commit (a local directory has none), and what was asked for
        extra = {"hf": spec["hf"], "revision": snapshot_commit(path), "revision_requested": spec.get("revision")}
    else:
        raise ModelSourceError(f"model {name!r}: unknown source {source!r} (expected toy, gguf or hf)")
    card = make_card(name, spec, path, load_tokenizer(path), extra)
    card["build_seconds"] = round(time.time() - t0, 1)
    io.write_json(card, card_path)
    log.info("model %s: %s", name, {k: card[k] for k in ("attention", "n_layers", "n_heads", "n_kv_heads")})
    return card
