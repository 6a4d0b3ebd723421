"""One job per task and model (pipeline.for_each_ablation), and one specificity job per model
(pipeline.specificity_each), write for every ablation the same files as one job per ablation did:
one model load changes no number."""

import polars as pl
import pytest
import torch
from helpers import card_for, ioi_shaped
from polars.testing import assert_frame_equal
from workflow_helpers import ROOT

from circuitloc import io, resume
from circuitloc.engine import pipeline
from circuitloc.engine.settings import CurveFiles, CurveSettings, JobSettings, ScoreFiles, SpecificityFiles
from circuitloc.stats import Bootstrap
from circuitloc.tasks.common import mark_scoring

ABLATIONS = ["zero-query", "mean-kv", "resample-layer", "zero-kv"]
CFG = {"n_curve": 16, "max_steps": 3, "methods": ["ranked", "greedy"], "greedy_candidates": 3,
       "greedy_steps": 2, "control_draws": 2, "prompts": "heldout"}
BOOT = Bootstrap(20, 0, 0.9)
OPTS = {"min_group": 2, "seed": 0}  # a rule's params, as the stash's digest sees them


def _job(card, **fields) -> JobSettings:
    return JobSettings(card=card, batch_tokens=4096, task="ioi", min_group=2, seed=0, **fields)


def _score_files(paths: dict, ablations) -> list:
    return [ScoreFiles(str(paths[a]).format("scores"), str(paths[a]).format("prompts")) for a in ablations]


def _curve_files(paths: dict, ablations) -> list:
    return [CurveFiles(*(str(paths[a]).format(k) for k in ("scores", "curve", "control"))) for a in ablations]


@pytest.fixture(scope="module")
def data(tmp_path_factory, tiny_dirs):
    """The tiny Qwen2 model (GQA: kv groups differ from query heads) and 32 IOI-shaped random
    prompts in 4 aligned templates, the first 8 for scoring."""
    root = tmp_path_factory.mktemp("groups")
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    io.write_parquet(mark_scoring(ioi_shaped(32, 4, seed=3), 8), root / "ioi.parquet")
    return root, card, root / "ioi.parquet"


def _paths(root, name):
    return {a: root / name / f"{a}.{{}}.parquet" for a in ABLATIONS}


def test_one_job_per_task_and_model_equals_one_job_per_ablation(data):
    root, card, dataset = data
    alone, grouped = _paths(root, "alone"), _paths(root, "grouped")
    job = _job(card, bootstrap=BOOT, curves=CurveSettings.of(CFG))
    for a in ABLATIONS:  # the old way: a fresh model and dataset for every ablation
        pipeline.score(job, dataset, a, _score_files(alone, [a])[0])
        pipeline.curve(job, dataset, a, _curve_files(alone, [a])[0])
    pipeline.for_each_ablation(pipeline.score, job, dataset, dict(zip(ABLATIONS, _score_files(grouped, ABLATIONS))))
    pipeline.for_each_ablation(pipeline.curve, job, dataset, dict(zip(ABLATIONS, _curve_files(grouped, ABLATIONS))))
    for a in ABLATIONS:
        for k in ("scores", "prompts", "curve", "control"):
            got, want = io.read_parquet(str(grouped[a]).format(k)), io.read_parquet(str(alone[a]).format(k))
            assert got.height > 0 or k == "control"  # the tiny model has no mid-layer units to draw
            assert_frame_equal(got, want, check_exact=True)
    # the ablations differ from each other, so a mix-up of files would show above
    drops = {a: io.read_parquet(str(grouped[a]).format("scores"))["drop"].to_list() for a in ABLATIONS}
    assert drops["zero-query"] != drops["mean-kv"] != drops["resample-layer"]


def test_one_specificity_job_per_model_equals_one_job_per_ablation(data, tmp_path):
    root, card, dataset = data
    job = _job(card, bootstrap=BOOT)
    abls = ["zero-query", "resample-kv", "mean-layer"]
    for a in abls:
        pipeline.score(job, dataset, a, ScoreFiles(str(tmp_path / f"{a}.scores.parquet"), str(tmp_path / f"{a}.pp.parquet")))

    def files(way, a):
        return SpecificityFiles(datasets={"ioi": str(dataset)}, scores={"ioi": str(tmp_path / f"{a}.scores.parquet")},
                                neutral=str(ROOT / "resources" / "neutral.txt"), out=str(tmp_path / f"{way}.{a}.parquet"))

    for a in abls:  # the old way: a job per ablation, its seed set before it loads the model
        torch.manual_seed(job.seed)
        pipeline.specificity(job, a, files("alone", a))
    torch.manual_seed(123)  # whatever state the job is in: each ablation starts from the job's seed
    pipeline.specificity_each(job, {a: files("grouped", a) for a in abls})
    got = {a: io.read_parquet(files("grouped", a).out) for a in abls}
    for a in abls:
        assert got[a].height == 1 and got[a]["ablation"].to_list() == [a]
        assert_frame_equal(got[a], io.read_parquet(files("alone", a).out), check_exact=True)
    assert got["zero-query"]["damage_ioi"].to_list() != got["mean-layer"]["damage_ioi"].to_list()


def test_a_failing_ablation_names_itself(data, tmp_path):
    _, card, dataset = data
    with pytest.raises(Exception, match="bogus"):
        pipeline.for_each_ablation(pipeline.score, _job(card), dataset,
                            {"zero-query": ScoreFiles(tmp_path / "a.parquet", tmp_path / "a.p.parquet"),
                             "bogus-query": ScoreFiles(tmp_path / "b.parquet", tmp_path / "b.p.parquet")})
    assert pl.read_parquet(tmp_path / "a.parquet").height > 0  # the ablation before it was written


def test_a_killed_job_keeps_its_finished_ablations_for_the_rerun(data, tmp_path):
    """Snakemake deletes every output of a failed job; the stash gives the finished ablations back
    to the rerun, which computes only the rest (and the same numbers)."""
    _, card, dataset = data
    abls = ["zero-query", "zero-kv", "mean-query"]
    outs = [ScoreFiles(tmp_path / f"{a}.parquet", tmp_path / f"{a}.prompts.parquet") for a in abls]
    key = resume.digest({"opts": OPTS}, [dataset], {"task": "ioi"})
    calls = []

    def failing_third(job, data, ablation, out, **k):
        calls.append(ablation)
        if ablation == "mean-query":
            raise RuntimeError("killed")
        return pipeline.score(job, data, ablation, out, **k)

    with pytest.raises(RuntimeError, match="killed"):
        pipeline.for_each_ablation(failing_third, _job(card), dataset, dict(zip(abls, outs)), stash=resume.Stash(tmp_path / "stash", key))
    first = io.read_parquet(outs[0].scores)
    for out in outs:  # what Snakemake does with a failed job's outputs
        for p in out.outputs():
            p.unlink(missing_ok=True)
    calls.clear()

    def counting(job, data, ablation, out, **k):
        calls.append(ablation)
        return pipeline.score(job, data, ablation, out, **k)

    pipeline.for_each_ablation(counting, _job(card), dataset, dict(zip(abls, outs)), stash=resume.Stash(tmp_path / "stash", key))
    assert calls == ["mean-query"]
    assert_frame_equal(io.read_parquet(outs[0].scores), first, check_exact=True)
    assert all(p.exists() for out in outs for p in out.outputs())
    assert not (tmp_path / "stash").exists()  # a job that succeeds leaves no stash


def test_a_stash_of_other_inputs_is_not_used(data, tmp_path):
    _, card, dataset = data
    a = resume.digest({"opts": OPTS, "code": "x"}, [dataset], {"task": "ioi"})
    b = resume.digest({"opts": OPTS, "code": "y"}, [dataset], {"task": "ioi"})
    assert a != b
    old = resume.Stash(tmp_path / "stash", a)
    f = tmp_path / "out.parquet"
    f.write_text("old result")
    old.keep("zero-query", [f])
    f.unlink()
    new = resume.Stash(tmp_path / "stash", b)
    assert not new.restore("zero-query", [f]) and not f.exists()
    assert not old.dir.exists()  # the other key's stash is gone
