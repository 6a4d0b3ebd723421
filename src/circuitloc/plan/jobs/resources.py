"""What a job asks its executor for (SLURM or local): memory, minutes and a GPU, estimated from the
config, since model cards exist only after the models stage.

A model's size comes from its `size:` hint (params_b, n_layers, n_heads; set for the paper's
models), a toy's recipe, or an hf model's config.json (its local directory or the hub cache, read
without network: `config_size`); a model with none of them gets the small one-CPU defaults, and the
run says so when it starts (`unsized`). The run-wide `resources:` block (every job), then the model's own `resources:`
block (the jobs that run the model) override the estimate key by key.

  mem_mb   2 GB + twice the weights (bytes per parameter from the model's dtype) for jobs that load
           the model; the models stage loads nothing for hf (meta device), a gguf's three copies.
  runtime  minutes: base + k * params_b * units / 100 for scores and curves, units = n_layers *
           n_heads (every unit score and every curve step is a pass over the prompts), times the
           model's number of ablations when one job runs them all; base + k * params_b for datasets;
           times CPU_SLOWDOWN on a CPU. Models: 30 + 10 * params_b (a download, or training a toy).
  gpu      1 for the jobs that run the model when device is cuda (the SLURM plugin's --gpus=1; or
           set gres / gpu_model); with `device_map: auto`, one per GPU its `max_memory` names, else
           enough GPUs of GPU_GB to hold 1.2 times its weights.
"""

from __future__ import annotations

import functools
import json
import math

from circuitloc.plan.config.hub import cached_config, hub_cache

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# the dtype of a model that names none, unless it is a hub model or GGUF on cuda (model_dtype): every
# other place that needs the default dtype reads this one
DEFAULT_DTYPE = "float32"
KEYS = ("mem_mb", "runtime", "gpu", "gpu_model", "gres", "constraint", "slurm_partition", "slurm_account",
        "slurm_extra", "qos")
# stage: (base minutes, minutes per billion parameters x 100 units, on a GPU)
RUNTIME = {"dataset": (10, 2), "scores": (10, 1), "curves": (30, 4), "specificity": (10, 1), "small": (10, 0)}
GPU_STAGES = ("dataset", "scores", "curves", "specificity")
GPU_KEYS = ("gpu", "gpu_model", "gres")
CPU_SLOWDOWN = 30
GPU_GB = 80  # one GPU's memory for device_map auto without max_memory (an A100 or H100 80GB)
UNGATED = ("gpt2", "gpt_neox", "gptj", "opt", "phi", "falcon", "gpt_neo", "bloom")  # MLPs of two matrices
TOY_VOCAB_BOUND = 4096  # a toy's word-level vocabulary is a few hundred words: an upper bound for its embedding


def model_size(spec: dict) -> tuple[float, int]:
    """(params_b, units) of a model's config entry: its `size` hint, else a toy's recipe, else an hf
    model's config.json (`config_size`), else (0, 0)."""
    hint = spec.get("size", {})
    if spec.get("source") == "toy" and not hint:
        t = spec.get("toy", {})
        d, n_layers = t.get("d_model", 128), t.get("n_layers", 2)
        return (n_layers * 12 * d * d + 2 * TOY_VOCAB_BOUND * d) / 1e9, n_layers * t.get("n_heads", 8)
    if not hint and spec.get("source") == "hf" and isinstance(spec.get("hf"), str):
        found = _read_size(spec["hf"], spec.get("revision"), str(hub_cache()))
        if found:
            return found
    return float(hint.get("params_b", 0)), int(hint.get("n_layers", 0)) * int(hint.get("n_heads", 0))


@functools.lru_cache(maxsize=None)
def _read_size(value: str, revision: str | None, cache: str) -> tuple[float, int] | None:
    """`config_size` of the config.json `hf:` names (`cache`: the hub cache it was looked up in)."""
    path = cached_config(value, revision)
    try:
        return config_size(json.loads(path.read_text())) if path else None
    except (OSError, ValueError):
        return None


def config_size(cfg: dict) -> tuple[float, int] | None:
    """(params_b, units) estimated from a Hugging Face config.json: attention (query, key, value and
    output projections, with grouped kv heads), the MLP (three matrices where gated, two in UNGATED
    families) and the embeddings (twice unless tied). None where layers, heads or width are missing."""
    cfg = cfg.get("text_config") or cfg

    def first(*keys, default=None):
        return next((cfg[k] for k in keys if cfg.get(k)), default)

    n_layers, heads = first("num_hidden_layers", "n_layer", "num_layers"), first("num_attention_heads", "n_head")
    d = first("hidden_size", "n_embd", "d_model")
    if not (n_layers and heads and d):
        return None
    kv = 1 if cfg.get("multi_query") else first("num_key_value_heads", "num_kv_heads", default=heads)
    ff = first("intermediate_size", "n_inner", "ffn_dim", default=4 * d)
    gated = 2 if cfg.get("model_type") in UNGATED else 3
    per_layer = d * first("head_dim", default=d // heads) * 2 * (heads + kv) + gated * d * ff
    embeddings = first("vocab_size", default=0) * d * (1 if cfg.get("tie_word_embeddings") else 2)
    return (n_layers * per_layer + embeddings) / 1e9, n_layers * heads


def model_dtype(config: dict, spec: dict | None) -> str:
    """The dtype a model runs in: its `dtype:`, else bfloat16 for a hub model or GGUF on cuda, else
    float32 (a toy, trained in float32; any model on a CPU, where the default run's numbers are)."""
    if spec is None:
        return DEFAULT_DTYPE
    if spec.get("dtype"):
        return spec["dtype"]
    return "bfloat16" if config.get("device") == "cuda" and spec.get("source") in ("hf", "gguf") else DEFAULT_DTYPE


def gpus(spec: dict, weights_gb: float) -> int:
    """GPUs a model's jobs need: one, or with `device_map: auto` one per GPU its `max_memory` names,
    else enough GPUs of GPU_GB to hold 1.2 times its weights (activations and the residual cache)."""
    if spec.get("device_map") != "auto":
        return 1
    named = [k for k in (spec.get("max_memory") or {}) if str(k).isdigit()]
    return len(named) or max(1, math.ceil(1.2 * weights_gb / GPU_GB))


def unsized(config: dict, models: dict) -> list[str]:
    """One line per model whose size is unknown when the plan is made (no `size:`, not a toy, no
    config.json to read): what its jobs will ask for, and how to say more."""
    lines = []
    for name, spec in models.items():
        if spec.get("size") or spec.get("source") == "toy" or model_size(spec) != (0.0, 0):
            continue
        res = estimate(config, spec, "scores")
        lines.append(f"model {name}: no size: hint and no config.json to read (local or in the hub cache "
                     f"{hub_cache()}); its score jobs ask for {res['mem_mb']} MB and {res['runtime']} min; set "
                     f"models.{name}.size: {{params_b, n_layers, n_heads}}")
    return lines


def estimate(config: dict, spec: dict | None, stage: str, n_ablations: int = 1, n_tasks: int = 1) -> dict:
    """The request of one job of `stage` ('model', 'dataset', 'scores', 'curves', 'specificity',
    'small', or 'model_stages': a model's datasets, scores and curves of `n_tasks` tasks in one job)
    on the model whose config entry is `spec` (None for a job over many models), with the config's
    overrides applied. `n_ablations`: how many ablations one score, curve or specificity job runs."""
    if stage == "model_stages":  # the sum of the jobs it replaces, the largest of their memories
        parts = [_request(config, spec, s, n_ablations) for s in ("dataset", "scores", "curves")]
        res = {**parts[-1], "mem_mb": max(p["mem_mb"] for p in parts),
               "runtime": n_tasks * sum(p["runtime"] for p in parts)}  # and a GPU where they ask for one
        return _overridden(config, spec, "dataset", res)
    return _overridden(config, spec, stage, _request(config, spec, stage, n_ablations))


def _request(config: dict, spec: dict | None, stage: str, n_ablations: int) -> dict:
    """`estimate` before the config's overrides."""
    cuda = config["device"] == "cuda"
    params_b, units = model_size(spec) if spec else (0.0, 0)
    weights_gb = params_b * DTYPE_BYTES[model_dtype(config, spec)] if spec else 0.0
    if stage == "model":
        gguf = bool(spec) and spec.get("source") == "gguf"
        mem_gb = 2 + (3 * weights_gb if gguf else 0)  # gguf: quantized file, dequantized copy, saved copy
        runtime = 30 + 10 * params_b
    else:
        if stage not in RUNTIME:
            raise ValueError(f"no resource estimate for stage {stage!r}: expected model or {', '.join(RUNTIME)}")
        base, k = RUNTIME[stage]
        mem_gb = 2 + (2 * weights_gb if stage in GPU_STAGES else 0)
        per_unit = units / 100 if stage in ("scores", "curves", "specificity") else 1  # datasets: passes over prompts
        if spec and stage in ("scores", "curves", "specificity"):  # one job runs each of its ablations
            per_unit *= n_ablations
        runtime = base + k * params_b * per_unit * (1 if cuda else CPU_SLOWDOWN)
    res = {"mem_mb": int(1024 * math.ceil(mem_gb)), "runtime": int(math.ceil(runtime))}
    if cuda and stage in GPU_STAGES:
        res["gpu"] = gpus(spec, weights_gb) if spec else 1
    return res


def _overridden(config: dict, spec: dict | None, stage: str, res: dict) -> dict:
    """`res` with the run-wide `resources:` block, then (for a job that runs the model) the model's."""
    cuda = config["device"] == "cuda"
    res = dict(res)
    overrides = dict(config.get("resources", {}))
    if spec and stage in GPU_STAGES:  # a model's own block is for the jobs that run it
        overrides.update(spec.get("resources", {}))
    if stage not in GPU_STAGES or not cuda:  # GPU settings only for GPU jobs
        overrides = {k: v for k, v in overrides.items() if k not in GPU_KEYS}
    elif "gres" in overrides:
        res.pop("gpu")  # a cluster that wants --gres=gpu:... gets only that
    res.update(overrides)
    return res


def requested_keys(config: dict, models: dict) -> list[str]:
    """Every resource name some job of this config may set (a rule's `resources:` takes one callable
    per name, returning None where a job sets none)."""
    keys = set(estimate(config, None, "small")) | ({"gpu"} if config["device"] == "cuda" else set())
    for spec in [config, *models.values()]:
        keys |= set(spec.get("resources", {}))
    return [k for k in KEYS if k in keys]
