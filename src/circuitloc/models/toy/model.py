"""The toy's architecture: a small Qwen2 with tied embeddings, initialised so that the MHA and GQA
models of a pair start from the same weights wherever their shapes agree, and trained with rotary
tables that every CPU rounds alike (exact.py)."""

from __future__ import annotations

import zlib

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from circuitloc.models.toy.exact import exact_rotary


def build_model(s: dict, vocab_size: int, tok):
    """A freshly initialised fp32 model for the resolved recipe `s` and the tokenizer's specials."""
    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=int(s["d_model"]), intermediate_size=int(s["d_mlp"]),
        num_hidden_layers=int(s["n_layers"]), num_attention_heads=int(s["n_heads"]),
        num_key_value_heads=int(s["n_kv_heads"]), max_position_embeddings=int(s["max_len"]),
        rope_theta=float(s["rope_theta"]), tie_word_embeddings=True, use_cache=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        initializer_range=0.02,
    )
    model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa")
    model.tie_weights()
    # cos and sin from a table rounded alike on every CPU (torch's own follow the CPU's MKL)
    exact_rotary(model, int(s["max_len"]))
    # Our own initialisation, one generator per parameter seeded by (seed, name): every parameter
    # that the MHA and GQA models share gets the same initial values.
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(int(s["seed"]) * 1_000_003 + zlib.crc32(name.encode()))
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * cfg.initializer_range)
    return model.float()
