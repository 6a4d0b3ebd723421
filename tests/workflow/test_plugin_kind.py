"""An ablation kind of the test suite's own (tests/plugins/synthetic_kind.py: 'pooled', every
head's mean over all positions of the task set) runs through the score job, and through the tiny
workflow, with no edit outside its module and the config: its one registration (a
`vocab.KindSpec`) is all the plan, the engine and the tables learn of it."""

import polars as pl
import pytest
import yaml
from helpers import card_for, ioi_shaped
from polars.testing import assert_frame_equal
from workflow_helpers import ROOT, copy_workflow, reuse_models, reuse_results, smk, smk_env

from circuitloc import io
from circuitloc.engine import pipeline
from circuitloc.engine import replacement
from circuitloc.engine.settings import JobSettings, ScoreFiles
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary import vocab
from circuitloc.tasks.common import mark_scoring

PLUGINS = ROOT / "tests" / "plugins"


@pytest.fixture
def pooled(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    assert registry.load_task_modules(["synthetic_kind"]) == ["pooled"]
    return "pooled"


def test_the_kinds_registration_is_all_the_plan_and_engine_read(pooled):
    assert pooled in registry.kinds() and registry.parse_ablation("pooled-kv") == ("pooled", "kv")
    assert "pooled" in registry.ablation_pattern()
    assert replacement.builder("pooled").__module__ == "synthetic_kind" and replacement.builder("zero") is None
    with pytest.raises(ValueError, match="already defined"):
        registry.register_kind(vocab.KindSpec("pooled", "elsewhere:fn"))
    with pytest.raises(ValueError, match="no '-'"):
        registry.register_kind(vocab.KindSpec("two-part"))


def test_every_registered_builder_takes_one_context():
    """Each kind's builder resolves from its dotted name and takes one parameter (the context)."""
    import inspect

    for name in registry.kinds():
        fn = replacement.builder(name)
        if fn is not None:
            assert list(inspect.signature(fn).parameters) == ["ctx"], name


def test_a_score_job_uses_a_kind_of_the_test_suite(pooled, tiny_dirs, tmp_path):
    """'pooled' scores equal mean ablation's where no group is large enough to align (min_group
    above the set's size: mean falls back to the pooled mean too), and differ from zero ablation's:
    the job ran the plugin's builder."""
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    data = tmp_path / "ioi.parquet"
    io.write_parquet(mark_scoring(ioi_shaped(16, 2, seed=2), 8), data)
    job = JobSettings(card=card, batch_tokens=4096, task="ioi", min_group=10_000, seed=0)
    out = {a: ScoreFiles(tmp_path / f"{a}.parquet", tmp_path / f"{a}.prompts.parquet")
           for a in ("pooled-query", "mean-query", "zero-query")}
    pipeline.for_each_ablation(pipeline.score, job, data, out)
    got, mean, zero = (io.read_parquet(out[a].scores) for a in out)
    assert_frame_equal(got, mean, check_exact=True)
    assert got["aligned"].to_list() == [0.0] * len(got)
    assert got["drop"].to_list() != zero["drop"].to_list()


@pytest.mark.workflow
@pytest.mark.long(25)
def test_a_kind_of_the_test_suite_runs_through_the_workflow(tiny_run, tmp_path):
    """The tiny workflow, the plugin named in task_modules and its kind in the model's ablation
    block: scores, curves and Table 1 under 'pooled', equal to mean ablation's with no aligned
    group; a misspelt kind is refused by name."""
    work = copy_workflow(tmp_path / "wf")
    reuse_models(tiny_run, work, ["tiny_gqa"])
    # and its IOI dataset, which the ablation block does not change
    reuse_results(tiny_run, work, "data/ioi/tiny_gqa.parquet", "data/ioi/tiny_gqa.filter.json")
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    block = {"kinds": ["mean", "pooled"], "units": ["query"], "min_group": 10_000}
    cfg["models"] = {"tiny_gqa": {**cfg["models"]["tiny_gqa"], "ablation": block}}
    cfg.update(task_modules=["synthetic_kind"], tasks={"ioi": cfg["tasks"]["ioi"]}, analysis=[])
    (work / "pooled.yaml").write_text(yaml.safe_dump(cfg))
    env = smk_env(PYTHONPATH=f"{ROOT / 'src'}:{PLUGINS}")
    smk("results/tables/table1_ioi_pooled-query.csv", "results/tables/table1_ioi_mean-query.csv",
        "--cores", "2", "--configfile", "pooled.yaml", cwd=work, env=env)
    res = work / "results"
    assert not (res / "logs" / "models").exists(), "the tiny run's model was to be reused"
    assert not (res / "logs" / "data").exists(), "the tiny run's dataset was to be reused"
    pooled_s, mean_s = (pl.read_parquet(res / f"scores/ioi/tiny_gqa/{k}-query.parquet") for k in ("pooled", "mean"))
    assert_frame_equal(pooled_s, mean_s, check_exact=True)
    t1 = {k: pl.read_csv(res / f"tables/table1_ioi_{k}-query.csv") for k in ("pooled", "mean")}
    assert t1["pooled"]["top_head"].to_list() == t1["mean"]["top_head"].to_list()
    assert t1["pooled"]["aligned"][0] == 0.0
    cfg["models"]["tiny_gqa"]["ablation"]["kinds"] = ["poled"]
    (work / "typo.yaml").write_text(yaml.safe_dump(cfg))
    out = smk("-n", "--configfile", "typo.yaml", cwd=work, env=env, check=False)
    assert out.returncode != 0
    assert "config: models.tiny_gqa.ablation.kinds: unknown kind 'poled' (did you mean 'pooled'?)" in out.stderr
