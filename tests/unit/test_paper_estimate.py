"""bench/paper_estimate.py: the whole paper's H200 time from counts. Its pass count of a score job is
the engine's own count on a tiny model; a model's sizes are its published ones; it runs on
config/paper.yaml and its totals are the sums of its rows."""

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import ld, tiny_model

from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import paper_estimate as pe  # noqa: E402


@pytest.mark.parametrize("budget", [30, 120, 4096])
def test_a_score_jobs_passes_are_the_engines_count(budget):
    """A scan of every head and the clean run, then the clean metric, on 5 prompts of 6 tokens with
    the GPU's merged passes: the engine counts what score_passes computes (budget 30: one copy a
    pass; 120: four; 4,096: every set of nearby start layers in one pass)."""
    g = torch.Generator().manual_seed(0)
    n, length, layers, heads = 5, 6, 3, 4
    prompts = Prompts(torch.randint(4, 40, (n, length), generator=g), torch.full((n,), length - 1),
                      {"a": torch.randint(4, 40, (n,), generator=g), "b": torch.randint(4, 40, (n,), generator=g)})
    scanner = Scanner(tiny_model("qwen_gqa", 40), heads, 16, budget)
    scanner.fill = True
    scanner.run(prompts, [{}] + [{layer: [h]} for layer in range(layers) for h in range(heads)], {"ld": ld})
    scanner.run(prompts, [{}], {"ld": ld})  # the clean metric
    m = {"layers": layers, "heads": heads}
    assert scanner.forward_passes == pytest.approx(pe.score_passes(m, heads, budget // (n * length)))


def test_sizes_are_the_published_ones():
    """Pythia-160M's non-embedding parameters: 85,056,000 (the Pythia paper's table of models)."""
    s = pe.sizes("EleutherAI/pythia-160m")
    assert (s["layers"], s["heads"], s["kv"], s["d_model"], s["nonemb"]) == (12, 12, 12, 768, 85_056_000)
    assert pe.sizes("Qwen/Qwen2.5-7B")["kv"] == 4


def test_the_paper_estimate_runs_and_its_totals_are_its_rows(tmp_path, capsys):
    loads = {m: {"jobs": 13, "loads": 10, "hash_every_load": 11, "hash_once": 1}
             for m in ("pythia_160m", "pythia_1.4b", "pythia_6.9b", "qwen2.5_0.5b", "qwen2.5_1.5b", "qwen2.5_7b")}
    (tmp_path / "loads.json").write_text(json.dumps({"models": loads}))
    assert pe.main(["--json", "--loads-json", str(tmp_path / "loads.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"bound", "early"}
    for est in out.values():
        assert set(est["models"]) == set(loads)
        col = 0.0
        for v in est["models"].values():
            st = v["stages"]
            assert st["total"]["seconds"] == pytest.approx(sum(st[s]["seconds"] for s in pe.STAGES))
            assert sum(st["curve"]["parts"].values()) == pytest.approx(st["curve"]["seconds"])
            assert st["score"]["flops"] == pytest.approx(2 * v["sizes"]["nonemb"] * st["score"]["tokens"])
            assert st["loads"]["loads"] == 10 and st["loads"]["hashes"] == 1
            col += st["total"]["seconds"]
        assert est["total_seconds"] == pytest.approx(col)
        assert est["total_hours"] == pytest.approx(col / 3600)
    assert out["early"]["total_seconds"] < out["bound"]["total_seconds"]


def test_an_mha_models_kv_ablations_cost_nothing():
    """Written from their query twins (engine.mha): Pythia's passes are the same without kv units,
    Qwen2.5's (GQA) are not."""
    import copy

    cfg = pe.load_config("config/paper.yaml")
    query_only = copy.deepcopy(cfg)
    query_only["ablation"]["units"] = ["query"]
    for model, hf, same in (("pythia_160m", "EleutherAI/pythia-160m", True), ("qwen2.5_0.5b", "Qwen/Qwen2.5-0.5B", False)):
        m = pe.sizes(hf)
        both, one = (pe.model_rows(c, model, m, (25, 10)) for c in (cfg, query_only))
        for stage in ("score", "curve", "specificity"):
            assert (both[stage]["passes"] == pytest.approx(one[stage]["passes"])) is same, (model, stage)
