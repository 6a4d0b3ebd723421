"""card.json: what later stages and tables need to know about a model, without loading it."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

CARD_FIELDS = ["name", "source", "family", "attention", "n_layers", "n_heads", "n_kv_heads", "d_model",
               "d_head", "n_params", "dtype", "tokenizer", "prepend_bos"]


def architecture(hf_config) -> dict:
    n_heads = int(hf_config.num_attention_heads)
    n_kv = int(getattr(hf_config, "num_key_value_heads", None) or n_heads)
    d_model = int(hf_config.hidden_size)
    d_head = int(getattr(hf_config, "head_dim", None) or d_model // n_heads)
    return {
        "attention": "mha" if n_kv == n_heads else "gqa",
        "n_layers": int(hf_config.num_hidden_layers),
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "d_model": d_model,
        "d_head": d_head,
    }


def count_params(hf_config) -> int:
    """Counted on the meta device, so a 7B card costs no memory."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return int(sum(p.numel() for p in model.parameters()))


def make_card(name: str, spec: dict, path: str, tokenizer, extra: dict | None = None) -> dict:
    hf_config = AutoConfig.from_pretrained(path)
    prepend_bos = spec.get("prepend_bos")
    if prepend_bos is None:  # the tokenizer's own convention
        ids = tokenizer("a")["input_ids"]
        prepend_bos = tokenizer.bos_token_id is not None and len(ids) > 0 and ids[0] == tokenizer.bos_token_id
    card = {
        "name": name,
        "source": spec["source"],
        "family": spec.get("family", name),
        **architecture(hf_config),
        "n_params": count_params(hf_config),
        "dtype": spec.get("dtype", "float32"),
        "tokenizer": type(tokenizer).__name__,
        "prepend_bos": bool(prepend_bos),
        "path": str(path),
        "facts_form": spec.get("facts_form", "natural"),
        "architecture": (hf_config.architectures or [type(hf_config).__name__])[0],
    }
    card.update(extra or {})
    return card
