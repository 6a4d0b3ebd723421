"""A staged job (`group_stages`: one job per model for its datasets, scores and curves) that fails
part-way keeps what it finished: the rerun restores the dataset and the scores from its stash
instead of recomputing them, and writes the same files as a run that never failed."""

from types import SimpleNamespace

import polars as pl
import pytest
from workflow_helpers import ROOT, resolve_over_test_config

from circuitloc.engine import stages
from circuitloc.engine.select import engine_of
from circuitloc.models.build import build_model
from circuitloc.plan.jobs import groups
from circuitloc.plan.config import views
from circuitloc.resume import Stash

pytestmark = pytest.mark.slow  # a staged rerun (pyproject's slow marker)

ABLATIONS = ["zero-query", "mean-kv"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    # the stored test toy (copied, not trained), on generated IOI prompts
    cfg = resolve_over_test_config({
        "models": {"toy": {"source": "toy", "toy": {"checkpoint": str(ROOT / ".test" / "models" / "tiny_gqa")}}},
        "tasks": {"ioi": {"source": {"kind": "generate"}, "n": 24, "n_score": 8}, "induction": None, "facts": None},
        "group_stages": True, "ablation": {"kinds": ["zero", "mean"], "units": ["query", "kv"], "min_group": 2},
        "bootstrap": {"n": 20}, "curves": {"methods": ["ranked"], "max_steps": 2, "control_draws": 2}})
    root = tmp_path_factory.mktemp("staged")
    card = build_model("toy", cfg["models"]["toy"], root / "card.json", root / "weights", engine_of)
    params = {"tasks": ["ioi"], "ablations": ABLATIONS, "seed": cfg["seed"], "batch_tokens": cfg["max_batch_tokens"],
              "device": "cpu", "opts": {"min_group": 2, "seed": cfg["seed"]}, "bootstrap": views.bootstrap_opts(cfg),
              "settings": groups.stage_settings(cfg, ["ioi"])(SimpleNamespace(model="toy"))}
    return card, params, root / "card.json"


def _run(setup, out, stash_root):
    card, params, card_path = setup
    o = SimpleNamespace(data=[str(out / "data.parquet")], filter=[str(out / "filter.json")],
           scores=[str(out / f"{a}.parquet") for a in ABLATIONS],
           prompts=[str(out / f"{a}.prompts.parquet") for a in ABLATIONS],
           curve=[str(out / f"{a}.curve.parquet") for a in ABLATIONS],
           control=[str(out / f"{a}.control.parquet") for a in ABLATIONS])
    files = stages.task_files(["ioi"], ABLATIONS, {"card": str(card_path)}, o)
    stages.run_stages(params, card, files, ABLATIONS, Stash(stash_root, "key"))
    return out


def test_a_staged_job_that_fails_keeps_its_dataset_and_scores_and_the_rerun_equals_a_clean_run(
        setup, tmp_path, monkeypatch):
    clean = _run(setup, tmp_path / "clean", tmp_path / "stash_clean")
    assert not (tmp_path / "stash_clean").exists()  # a job that succeeds leaves no stash

    real_curve = stages.curve

    def first_curve_then_fail(job, data, ablation, out, **kw):
        if ablation == ABLATIONS[1]:
            raise RuntimeError("killed")
        return real_curve(job, data, ablation, out, **kw)

    monkeypatch.setattr(stages, "curve", first_curve_then_fail)
    with pytest.raises(RuntimeError, match="killed"):
        _run(setup, tmp_path / "again", tmp_path / "stash")
    kept = sorted(p.parent.relative_to(tmp_path / "stash" / "key").as_posix()
                  for p in (tmp_path / "stash").rglob("done"))
    assert kept == ["curves/ioi/zero-query", "data/ioi/dataset", "scores/ioi/mean-kv", "scores/ioi/zero-query"]

    def never(*a, **k):
        raise AssertionError("recomputed a stage that had finished")

    monkeypatch.setattr(stages, "curve", real_curve)
    monkeypatch.setattr(stages, "build_dataset", never)
    monkeypatch.setattr(stages, "score", never)
    again = _run(setup, tmp_path / "again", tmp_path / "stash")
    assert not (tmp_path / "stash").exists()
    for f in sorted(p.name for p in clean.iterdir()):
        if f.endswith(".parquet"):
            assert pl.read_parquet(again / f).equals(pl.read_parquet(clean / f)), f
        else:
            assert (again / f).read_text() == (clean / f).read_text(), f
