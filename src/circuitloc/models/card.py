"""card.json: what later stages and tables need to know about a model, without loading it.

Its bytes depend only on what determines the model (no timings: those are in the job's log and
benchmark file), so a rebuild with identical weights writes an identical card; the weights' sizes
and sha256 in it let every job that loads them refuse a corrupt or truncated file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from circuitloc import weightstamps
from circuitloc.errors import ModelSourceError
from circuitloc.modelcard import ModelCard
from circuitloc.plan.jobs.resources import DEFAULT_DTYPE

_CHUNK = 1 << 20
# The files that hold a model directory's tensors (not its config or tokenizer): what the card hashes.
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")



def architecture(hf_config) -> dict:
    n_heads = int(hf_config.num_attention_heads)
    n_kv = int(kv_heads(hf_config) or n_heads)
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
    from transformers import AutoModelForCausalLM  # here, not at import: a job that loads no model never imports it

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return int(sum(p.numel() for p in model.parameters()))


def sha256_file(path) -> str:
    """Hex sha256 of a file, read in chunks so large models need no memory. Here, not in gguf.py: every
    job that loads weights checks them, and this module is already in every such job's code hash."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def weight_files(path) -> list[Path]:
    """The weights files of a model directory, sorted by name (a hub snapshot's are links into blobs/)."""
    d = Path(path)
    return sorted({f for pattern in WEIGHT_FILES for f in d.glob(pattern) if f.is_file()})


def weights_record(path) -> dict:
    """Each weights file's size and sha256, hashed once here at build, and one sha256 over them all
    (`sha256`: one value that names the weights, e.g. to compare two builds)."""
    files = {f.name: {"bytes": f.stat().st_size, "sha256": sha256_file(f)} for f in weight_files(path)}
    for f in weight_files(path):  # the jobs that load them reuse this hash (circuitloc.weightstamps)
        weightstamps.remember(f, files[f.name]["sha256"])
    if not files:
        raise ModelSourceError(f"{path} holds no weights file ({', '.join(WEIGHT_FILES)})")
    listing = "".join(f"{name} {v['bytes']} {v['sha256']}\n" for name, v in files.items())
    return {"sha256": hashlib.sha256(listing.encode()).hexdigest(), "files": files}


def make_card(name: str, spec: dict, path: str, tokenizer, extra: dict | None = None) -> ModelCard:
    """The card of the model at `path` (its config and tokenizer) as `spec` describes it; `extra`: the
    source's own fields and the weights record (circuitloc.modelcard.SOURCE_FIELDS)."""
    from transformers import AutoConfig

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
        "dtype": spec.get("dtype", DEFAULT_DTYPE),
        "tokenizer": type(tokenizer).__name__,
        "prepend_bos": bool(prepend_bos),
        "path": str(path),
        "facts_form": spec.get("facts_form", "natural"),
        "architecture": (hf_config.architectures or [type(hf_config).__name__])[0],
        **{k: spec[k] for k in ("device_map", "max_memory") if spec.get(k)},
    }
    card.update(extra or {})
    return ModelCard(**card)


def kv_heads(hf_config) -> int | None:
    """Key/value heads as each family's config names them: `num_key_value_heads` (Llama, Qwen,
    Mistral...), Falcon's `num_kv_heads` under its new decoder architecture, or one shared head for
    Falcon's original multi-query layout; None where the config says nothing (MHA)."""
    if getattr(hf_config, "num_key_value_heads", None):
        return hf_config.num_key_value_heads
    if getattr(hf_config, "multi_query", False) and not getattr(hf_config, "new_decoder_architecture", False):
        return 1
    return getattr(hf_config, "num_kv_heads", None)
