"""bench/gpu.py, the GPU bench of the 7B shapes, run on the CPU with tiny models (--tiny) so that it
cannot rot where CI has no GPU: its engine and its naive TransformerLens loop must give the same
per-head scores (two independent computations), and its work counts must be the engine's."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu

    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    return gpu.main(["--tiny", "--prompts", "4", "--width", "8", "--out", str(out)])


def test_engine_equals_naive_loop(result):
    for name in ("tiny-qwen2", "tiny-neox"):
        engine, naive = (next(r for r in result["records"] if r["model"] == name and r["mode"] == m)
                         for m in ("engine", "naive"))
        assert len(engine["scores"]) == engine["sets"] == 1 + 3 * 4  # clean run + 4 heads of 3 layers
        assert engine["scores"] == pytest.approx(naive["scores"], abs=1e-4)


def test_work_and_rates(result):
    assert result["device"] == "cpu" and result["published_peak_tflop_per_s"] is None
    for r in result["records"]:
        assert r["seconds"] > 0 and r["tflop_per_s"] > 0 and r["share_of_peak"] is None
        if r["mode"] == "naive":
            assert r["forward_passes"] == r["sets"]  # one full forward per set
        else:  # the clean run, then each head resumed at its layer: 1 + 4 * (3 + 2 + 1) / 3 passes
            assert r["forward_passes"] == pytest.approx(1 + 4 * 6 / 3, abs=0.5)


def test_published_peak():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu

    assert gpu.published_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.published_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.published_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu.published_peak("Tesla T4") is None
