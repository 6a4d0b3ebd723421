"""The toy recipe: every key a config's `toy:` block may set, its default, and the resolved recipe
(a plain dict, as the config spells it and toy_checks.json records it)."""

from __future__ import annotations

import copy

from circuitloc.errors import ToyTrainingError

DEFAULTS: dict = {
    # architecture (Qwen2, tied embeddings)
    "n_layers": 2,
    "d_model": 128,
    "n_heads": 8,
    "n_kv_heads": 8,
    "d_mlp": None,  # None -> 4 * d_model
    "rope_theta": 10000.0,
    "max_len": 128,
    # optimisation
    "seed": 0,
    "steps": 1600,
    "batch": 64,
    "lr": 1e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "betas": [0.9, 0.98],
    "clip": 1.0,
    "loss": "all",  # "all" tokens, or "targets" only
    "pack": True,  # rows packed into shared sequences (corpus.pack); false: one padded row each
    "threads": 1,
    "kernels": "host",  # or "pinned": one CPU kernel path on every x86-64 machine (circuitloc.kernels)
    # data
    "mix": {"ioi": 18, "induction": 36, "facts": 10},  # relative weights per batch
    "repeat_len": [6, 20],  # induction rows: <bos> x1..xk x1..xk, k in this range
    "pool_size": 300,  # pseudo-words added to the vocabulary
    "n_facts": 165,
    "facts_path": None,  # None -> resources/facts/facts.tsv
    "ioi_resources": None,  # None -> resources/ioi
    # logging / evaluation
    "log_every": 100,
    "eval_every": 0,  # >0: run the held-out checks every this many steps (logged only)
    "eval": {"n_ioi": 200, "n_induction": 200, "prefix_len": [4, 8], "suffix_len": [10, 16], "seed": 12345},
    "acceptance": {"ioi_ld": 2.0, "ioi_acc": 0.9, "icl_loss": 0.5, "facts_acc": 0.9, "enforce": True},
}


def resolve_spec(spec: dict | None) -> dict:
    """DEFAULTS overlaid with `spec` (nested dicts merged one level deep)."""
    out = copy.deepcopy(DEFAULTS)
    for k, v in (spec or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    if out["d_mlp"] is None:
        out["d_mlp"] = 4 * int(out["d_model"])
    if int(out["d_model"]) % int(out["n_heads"]) or int(out["n_heads"]) % int(out["n_kv_heads"]):
        raise ToyTrainingError(
            f"toy spec: d_model ({out['d_model']}) must be divisible by n_heads ({out['n_heads']}) "
            f"and n_heads by n_kv_heads ({out['n_kv_heads']})")
    if out["kernels"] not in ("host", "pinned"):
        raise ToyTrainingError(f"toy spec: kernels must be 'host' or 'pinned', got {out['kernels']!r}")
    if not isinstance(out["pack"], bool):
        raise ToyTrainingError(f"toy spec: pack must be true or false, got {out['pack']!r}")
    if out["loss"] not in ("all", "targets"):
        raise ToyTrainingError(f"toy spec: loss must be 'all' or 'targets', got {out['loss']!r}")
    return out
