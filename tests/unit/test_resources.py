"""Job requests from the config (circuitloc.plan.jobs.resources), against hand-worked numbers."""

import pytest

from circuitloc.plan.jobs.resources import estimate, model_size, requested_keys

CPU = {"device": "cpu"}
GPU = {"device": "cuda"}
QWEN_7B = {"source": "hf", "hf": "Qwen/Qwen2.5-7B", "size": {"params_b": 7.6, "n_layers": 28, "n_heads": 28},
           "dtype": "bfloat16"}


def test_size_from_the_hint_or_the_toy_recipe():
    assert model_size(QWEN_7B) == (7.6, 28 * 28)
    toy = {"source": "toy", "toy": {"d_model": 64, "n_layers": 2, "n_heads": 8}}
    assert model_size(toy) == pytest.approx(((2 * 12 * 64 * 64 + 2 * 4096 * 64) / 1e9, 16))
    assert model_size({"source": "gguf", "gguf": {}}) == (0.0, 0)


def test_scores_on_a_gpu_scale_with_units_and_ablations():
    # 2 GB + 2 x 7.6e9 x 2 bytes = 32.4 GB -> 33 GB; 10 + 1 x 7.6 x 784 / 100 x 3 ablations = 188.76 -> 189 min
    res = estimate(GPU, QWEN_7B, "scores", n_ablations=3)
    assert res == {"mem_mb": 33 * 1024, "runtime": 189, "gpu": 1}
    # on a CPU: 10 + 30 x 178.752 = 5372.6 -> 5373 min, no GPU
    assert estimate(CPU, QWEN_7B, "scores", 3) == {"mem_mb": 33 * 1024, "runtime": 5373}


def test_overrides_apply_in_order_and_gpu_keys_only_to_gpu_jobs():
    cfg = {**GPU, "resources": {"slurm_partition": "gpu", "gres": "gpu:a100:1"}}
    spec = {**QWEN_7B, "resources": {"runtime": 600}}
    res = estimate(cfg, spec, "curves")
    assert res["runtime"] == 600 and res["gres"] == "gpu:a100:1" and "gpu" not in res
    small = estimate(cfg, None, "small")
    assert small == {"mem_mb": 2048, "runtime": 10, "slurm_partition": "gpu"}
    assert set(requested_keys(cfg, {"q": spec})) == {"mem_mb", "runtime", "gpu", "slurm_partition", "gres"}
    with pytest.raises(ValueError, match="no resource estimate for stage 'plots'"):
        estimate(cfg, spec, "plots")


def test_models_stage_holds_a_gguf_three_times():
    spec = {"source": "gguf", "size": {"params_b": 0.135, "n_layers": 30, "n_heads": 9}}
    # 2 + 3 x 0.54 GB = 3.62 -> 4 GB; 30 + 1.35 -> 32 min
    assert estimate(CPU, spec, "model") == {"mem_mb": 4096, "runtime": 32}
