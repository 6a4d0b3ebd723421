"""bench/gpu.py, the GPU bench of the 7B shapes, run on the CPU with tiny models (--tiny) so that it
cannot rot where CI has no GPU. It goes the jobs' own way (the model stage's card, the dataset
stage's IOI rows, `AblationJob`'s load with `max_batch_tokens: auto`), on IOI-length buckets, with
repeats; its engine and its naive TransformerLens loop give the same per-head scores (two
independent computations), resume gives today's ranked curve, attribution leaves no gradient, and
its work counts are the engine's."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["scan", "naive", "ranked", "ranked_today", "attribution", "mean_build", "mean_scan"]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu

    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    return gpu.main(["--tiny", "--prompts", "8", "--repeats", "2", "--curve-steps", "5", "--out", str(out)])


def _records(result, name):
    return {r["stage"]: r for r in result["records"] if r["model"] == name}


def test_the_jobs_own_load_path_and_budget(result):
    from circuitloc.engine.budget import CPU_TOKENS

    for job in result["jobs"]:
        assert job["weights_files"] >= 1  # the model stage's card: its weights hashed, checked at load
        assert job["card"]["engine"] == "scan" and job["card"]["dtype"] == "float32"
        assert job["batch_tokens_setting"] == "auto" and job["max_batch_tokens"] == CPU_TOKENS
        assert job["prompts"] == 8 and len(job["lengths"]) >= 2 and job["buckets"] >= 2  # IOI's lengths
        assert 12 <= job["lengths"][0] <= job["lengths"][-1] <= 30


def test_engine_equals_naive_loop_and_resume_equals_today(result):
    for job in result["jobs"]:
        recs = _records(result, job["model"])
        assert list(recs) == STAGES
        assert len(recs["scan"]["scores"]) == recs["scan"]["sets"] == 1 + 3 * 4  # clean run + 4 heads of 3 layers
        assert recs["scan"]["scores"] == pytest.approx(recs["naive"]["scores"], abs=1e-4)
        assert job["engine_vs_naive"] <= 1e-4 and job["resume_vs_today"] <= 1e-5
        assert recs["ranked"]["steps"] == 5
        assert recs["ranked"]["forward_passes"] < recs["ranked_today"]["forward_passes"]
        assert job["mean_vs_zero"] > 1e-4  # the mean replacement is not zero ablation


def test_repeats_work_counts_and_rates(result):
    assert result["device"] == "cpu" and result["published_peak_tflop_per_s"] is None and result["repeats"] == 2
    for job in result["jobs"]:
        recs = _records(result, job["model"])
        for r in recs.values():
            assert r["repeats"] == 2 and len(r["seconds_all"]) == 2 and r["seconds_min"] <= r["seconds"]
            assert r["share_of_peak"] is None and r["peak_gib"] is None
        assert recs["naive"]["forward_passes"] == recs["naive"]["sets"]  # one full forward per set
        # per bucket: the clean stream (1), the clean set resumed at the last layer (1/3), each head
        # resumed at its layer (4 * (3 + 2 + 1) / 3); in shares of the padded prompt set
        assert recs["scan"]["forward_passes"] == pytest.approx((1 + 1 / 3 + 4 * 6 / 3) * job["token_share"])
        assert recs["attribution"]["forward_passes"] == 2.0 and recs["attribution"]["grads_left"] == 0
        assert recs["scan"]["tflop_per_s"] > 0


def test_published_peak():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu

    assert gpu.published_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.published_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.published_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu.published_peak("Tesla T4") is None
