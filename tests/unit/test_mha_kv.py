"""Under MHA a kv group is one query head: a job that runs a query ablation and its kv twin writes
the kv files from the query ones (engine.mha) instead of running them again. The files must be
those a kv run computes (every number, every label), and the job must run fewer engine passes."""

import pytest
import torch
from helpers import card_for, ioi_shaped
from polars.testing import assert_frame_equal
from workflow_helpers import ROOT

from circuitloc import io
from circuitloc.engine import mha, pipeline
from circuitloc.engine.scan import Scanner
from circuitloc.engine.settings import CurveFiles, CurveSettings, JobSettings, ScoreFiles, SpecificityFiles
from circuitloc.stats import Bootstrap
from circuitloc.tasks.common import mark_scoring

# kv first: the job runs the query twin first whatever the order
ABLATIONS = ["zero-kv", "zero-query", "resample-kv", "resample-query"]
CFG = {"n_curve": 16, "max_steps": 3, "methods": ["ranked", "greedy"], "greedy_candidates": 3,
       "greedy_steps": 2, "control_draws": 2, "prompts": "heldout"}
BOOT = Bootstrap(20, 0, 0.9)


def _job(card, **fields) -> JobSettings:
    return JobSettings(card=card, batch_tokens=4096, task="ioi", min_group=2, seed=0, **fields)


@pytest.fixture(scope="module")
def data(tmp_path_factory, tiny_dirs):
    """The tiny MHA Qwen2 (4 query heads, 4 kv heads), built from its config, and 32 IOI-shaped
    prompts, the first 8 for scoring."""
    root = tmp_path_factory.mktemp("mha")
    card = card_for(tiny_dirs["qwen_mha"], name="tinymha")
    assert card.n_kv_heads == card.n_heads
    io.write_parquet(mark_scoring(ioi_shaped(32, 4, seed=3), 8), root / "ioi.parquet")
    return root, card, root / "ioi.parquet"


def _files(root, way):
    f = {a: str(root / way / f"{a}.{{}}.parquet") for a in ABLATIONS}
    return ({a: ScoreFiles(p.format("scores"), p.format("prompts")) for a, p in f.items()},
            {a: CurveFiles(*(p.format(k) for k in ("scores", "curve", "control"))) for a, p in f.items()})


@pytest.fixture
def passes(monkeypatch):
    """How many times the engine ran a batch of ablations."""
    count = {"n": 0}
    run = Scanner.run

    def counted(self, *a, **k):
        count["n"] += 1
        return run(self, *a, **k)

    monkeypatch.setattr(Scanner, "run", counted)
    return count


def test_kv_files_of_an_mha_model_equal_a_kv_run_with_fewer_passes(data, passes):
    root, card, dataset = data
    job = _job(card, bootstrap=BOOT, curves=CurveSettings.of(CFG))
    alone_s, alone_c = _files(root, "alone")
    for a in ABLATIONS:  # the old way: every ablation computed, each in a job of its own
        torch.manual_seed(job.seed)
        pipeline.score(job, dataset, a, alone_s[a])
        torch.manual_seed(job.seed)
        pipeline.curve(job, dataset, a, alone_c[a])
    computed, passes["n"] = passes["n"], 0
    grouped_s, grouped_c = _files(root, "grouped")
    pipeline.for_each_ablation(pipeline.score, job, dataset, grouped_s)
    pipeline.for_each_ablation(pipeline.curve, job, dataset, grouped_c)
    for a in ABLATIONS:
        for k in ("scores", "prompts", "curve", "control"):
            path = str(root / "{}" / f"{a}.{k}.parquet")
            got, want = io.read_parquet(path.format("grouped")), io.read_parquet(path.format("alone"))
            assert got.height > 0 or k == "control"
            assert_frame_equal(got, want, check_exact=True)
    kv = io.read_parquet(grouped_s["zero-kv"].scores)
    assert kv["unit"].str.contains("G").all() and not kv["unit"].str.contains("H").any()
    # the kv runs are gone: about half the passes (the query and kv ablations cost the same)
    assert 0 < passes["n"] <= computed // 2 + 2, (passes["n"], computed)


def test_specificity_of_an_mha_kv_ablation_is_its_query_twins(data, tmp_path):
    root, card, dataset = data
    job = _job(card, bootstrap=BOOT)
    abls = ["zero-kv", "zero-query"]
    scores = {a: ScoreFiles(str(tmp_path / f"{a}.s.parquet"), str(tmp_path / f"{a}.p.parquet")) for a in abls}
    pipeline.for_each_ablation(pipeline.score, job, dataset, scores)

    def files(way, a):
        return SpecificityFiles(datasets={"ioi": str(dataset)}, scores={"ioi": scores[a].scores},
                                neutral=str(ROOT / "resources" / "neutral.txt"), out=str(tmp_path / f"{way}.{a}.parquet"))

    torch.manual_seed(job.seed)
    pipeline.specificity(job, "zero-kv", files("alone", "zero-kv"))
    pipeline.specificity_each(job, {a: files("grouped", a) for a in abls})
    got = io.read_parquet(files("grouped", "zero-kv").out)
    assert got["ablation"].to_list() == ["zero-kv"] and got["top_unit"].str.contains("G").all()
    assert_frame_equal(got, io.read_parquet(files("alone", "zero-kv").out), check_exact=True)


def test_only_an_mha_models_kv_ablations_have_a_query_twin(data, tiny_dirs):
    _, card, _ = data
    gqa = card_for(tiny_dirs["qwen_gqa"], name="tinygqa")
    assert mha.query_twin(card, "mean-kv") == "mean-query"
    assert mha.query_twin(card, "mean-query") is None and mha.query_twin(card, "mean-layer") is None
    assert mha.query_twin(gqa, "mean-kv") is None  # GQA: a kv group is several query heads
