"""One way to open every model: a TransformerBridge on raw weights (no folding) and its tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ModelSourceError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_hf(name: str, repo: str) -> str:
    """A local directory as is; a hub id through the local cache (never a silent download offline)."""
    if Path(repo).expanduser().exists() or repo.startswith(("/", ".", "~")) or repo.count("/") != 1:
        repo = str(Path(repo).expanduser())
        if not Path(repo).is_dir():
            raise ModelSourceError(f"model {name!r}: local directory {repo} does not exist")
        if not (Path(repo) / "config.json").exists():
            raise ModelSourceError(f"model {name!r}: {repo} has no config.json (not a Hugging Face model directory)")
        return repo
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE, HF_HUB_OFFLINE

    try:
        return snapshot_download(repo, local_files_only=HF_HUB_OFFLINE,
                                 allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*"])
    except Exception as e:  # noqa: BLE001 - any failure here means the same thing to the user
        where = f"the Hugging Face cache {HF_HUB_CACHE}"
        hint = ("pre-download it on a machine with internet: `huggingface-cli download "
                f"{repo}` with the same HF_HOME" if HF_HUB_OFFLINE else "check the id and your network")
        raise ModelSourceError(f"model {name!r}: {repo} not found in {where} "
                               f"(HF_HUB_OFFLINE={int(HF_HUB_OFFLINE)}); {hint}. ({type(e).__name__}: {e})") from e


def load_hf(path: str, dtype: str = "float32", device: str = "cpu"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation="eager")
    return model.to(device).eval(), tokenizer


def _twin(model):
    """A second module tree over the very same weight tensors (no copy): the bridge wraps one
    tree in place with its hook points, the scan engine runs the other without that overhead."""
    import copy
    import itertools

    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo=shared).eval()


def load(card: dict, device: str = "cpu"):
    """(bridge, tokenizer) for a card: TransformerLens' TransformerBridge on raw weights.
    `engine_model(bridge)` is the same weights as a plain Hugging Face model."""
    from transformer_lens.model_bridge import TransformerBridge

    model, tokenizer = load_hf(card["path"], card.get("dtype", "float32"), device)
    bridge = TransformerBridge.boot_transformers(card["path"], hf_model=_twin(model), tokenizer=tokenizer,
                                                 dtype=DTYPES[card.get("dtype", "float32")], device=device)
    bridge.eval()
    object.__setattr__(bridge, "_plain_model", model)  # not a submodule: no double registration
    return bridge, tokenizer


def engine_model(bridge):
    return getattr(bridge, "_plain_model", None) or bridge.original_model
