"""The benches run where they are meant to, checked on the CPU with tiny models (issue 64, item 5):
`bench/protocol.py --device cpu` (a curve job stage by stage, every variant against today's numbers)
and `bench/scan.py --random` (the engine against the naive loop on a random model of a known
configuration). bench/gpu.py --tiny: tests/models/test_gpu_bench.py."""

import re
import sys
from pathlib import Path

import pytest
from helpers import card_for, tiny_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run's layout as bench/protocol.py reads it: models/tiny/card.json (weights beside it) and
    data/ioi/tiny.parquet, the dataset stage's IOI rows for the model's tokenizer."""
    import gpu

    from circuitloc.tasks.registry import build_dataset

    root = tmp_path_factory.mktemp("run")
    weights = root / "models" / "tiny" / "weights"
    tok = gpu.ioi_tokenizer(weights)  # IOI's words, one token each
    tiny_model("qwen_gqa", len(tok)).save_pretrained(weights)
    card = card_for(weights, name="tiny")
    card.write(root / "models" / "tiny" / "card.json")
    df, _ = build_dataset("ioi", tok, card.prepend_bos, {"n": 30, "n_score": 10}, 0)
    (root / "data" / "ioi").mkdir(parents=True)
    df.write_parquet(root / "data" / "ioi" / "tiny.parquet")
    return root


def test_protocol_runs_on_a_device_and_each_saving_keeps_todays_numbers(run_dir, capsys):
    import protocol

    shown = protocol.main(["--card", str(run_dir / "models" / "tiny" / "card.json"), "--data", str(run_dir / "data"),
                           "--tasks", "ioi", "--quick", "--scan", "--device", "cpu", "--greedy-guided", "2",
                           "--threads", "1"])["ioi"]
    assert "tiny (float32) on cpu" in capsys.readouterr().out
    assert list(shown) == list(protocol.VARIANTS)
    for name, v in shown.items():
        c = v["vs_first"]
        assert c["ranked_max_diff"] <= 1e-5 and c["sufficiency_max_diff"] <= 1e-5 and c["control_max_diff"] <= 1e-5
        if name != "guided":
            assert c["greedy_same_choices"] and c["greedy_max_diff"] <= 1e-5
        assert v["summary"]["heads_to"] == shown["today"]["summary"]["heads_to"]
    assert shown["resume"]["vs_first"]["area_diff"] == pytest.approx(0.0, abs=1e-6)
    # a ranked curve stopped early holds its last damage (>= 1, clipped to 1) to the end: never a smaller area
    assert shown["resume+stop"]["vs_first"]["area_diff"] >= -1e-6
    assert shown["resume"]["cost"]["ranked"][0] < shown["today"]["cost"]["ranked"][0]  # resumed steps cost less
    # attribution ranked the pool: it chose a step, or an audited step compared its pick with the exact best
    audit = shown["guided"]["audit"]
    assert not audit.startswith("0 of") or re.search(r"\d+ of [1-9]\d* audited steps agree", audit), audit


def test_scan_random_runs(tmp_path, capsys):
    import scan

    # in this process (no interpreter and torch import per measurement) and a small matmul: what is
    # checked is the engine against the naive loop and the passes, not the timings
    out = scan.main(["--random", "tiny-llama", "--prompts", "3", "--cache", str(tmp_path), "--in-process",
                     "--matmul-size", "256"])
    printed = capsys.readouterr().out
    assert out["model"] == "tiny-llama" and "model tiny-llama (4 layers x 8 heads)" in printed
    assert out["max_diff"] <= 1e-4 and "identical within 1e-4" in printed
    assert out["naive"]["passes"] == 1 + 4 * 8  # one full forward per set: the clean run and each head
    assert out["engine"]["passes"] < out["naive"]["passes"]
    assert out["attribution"]["passes"] == 2.0 and len(out["attribution"]["values"]) == 4 * 8
    assert out["matmul"]["flops_per_s"] > 0 and "256^2 torch.mm" in printed
