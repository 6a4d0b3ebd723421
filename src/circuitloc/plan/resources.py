"""What a job asks its executor for (SLURM or local): memory, minutes and a GPU, estimated from the
config, since model cards exist only after the models stage.

A model's size comes from its `size:` hint (params_b, n_layers, n_heads; set for the paper's
models) or a toy's recipe; a model without either (a gguf or hf model nobody sized) gets the small
one-CPU defaults. The run-wide `resources:` block (every job), then the model's own `resources:`
block (the jobs that run the model) override the estimate key by key.

  mem_mb   2 GB + twice the weights (bytes per parameter from the model's dtype) for jobs that load
           the model; the models stage loads nothing for hf (meta device), a gguf's three copies.
  runtime  minutes: base + k * params_b * units / 100 for scores and curves, units = n_layers *
           n_heads (every unit score and every curve step is a pass over the prompts), times the
           model's number of ablations when one job runs them all; base + k * params_b for datasets;
           times CPU_SLOWDOWN on a CPU. Models: 30 + 10 * params_b (a download, or training a toy).
  gpu      1 for the jobs that run the model when device is cuda (the SLURM plugin's --gpus=1; or
           set gres / gpu_model).
"""

from __future__ import annotations

import math

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
KEYS = ("mem_mb", "runtime", "gpu", "gpu_model", "gres", "constraint", "slurm_partition", "slurm_account",
        "slurm_extra", "qos")
# stage: (base minutes, minutes per billion parameters x 100 units, on a GPU)
RUNTIME = {"dataset": (10, 2), "scores": (10, 1), "curves": (30, 4), "specificity": (10, 1), "small": (10, 0)}
GPU_STAGES = ("dataset", "scores", "curves", "specificity")
GPU_KEYS = ("gpu", "gpu_model", "gres")
CPU_SLOWDOWN = 30
TOY_VOCAB_BOUND = 4096  # a toy's word-level vocabulary is a few hundred words: an upper bound for its embedding


def model_size(spec: dict) -> tuple[float, int]:
    """(params_b, units) of a model's config entry: its `size` hint, else a toy's recipe, else (0, 0)."""
    hint = spec.get("size", {})
    if spec.get("source") == "toy" and not hint:
        t = spec.get("toy", {})
        d, n_layers = t.get("d_model", 128), t.get("n_layers", 2)
        return (n_layers * 12 * d * d + 2 * TOY_VOCAB_BOUND * d) / 1e9, n_layers * t.get("n_heads", 8)
    return float(hint.get("params_b", 0)), int(hint.get("n_layers", 0)) * int(hint.get("n_heads", 0))


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
    weights_gb = params_b * DTYPE_BYTES[spec.get("dtype", "float32")] if spec else 0.0
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
        res["gpu"] = 1
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
