"""A family-shared condition is a task spec's `shared` and its module's `shared_dataset`, for any
task: the vocabulary registers the condition with the task, the plan builds it with one rule for
every shared task, and a task of the test suite's own is built per model and scored on the
prompts its family shares by the tiny workflow. Per-task defaults (min_heldout) come from the task's spec."""

import sys
import types

import polars as pl
import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, planned_jobs, resolve_over_test_config, reuse_models, smk, smk_env

from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.config import views
from circuitloc.plan.vocabulary import vocab

PLUGINS = ROOT / "tests" / "plugins"


def _config(monkeypatch, **layer):
    monkeypatch.syspath_prepend(str(PLUGINS))
    return resolve_over_test_config(layer)


def test_a_task_modules_shared_condition_is_registered_with_it(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    assert registry.load_task_modules(["family_task"]) == ["echo"]
    shared = registry.task("echo_shared")
    assert shared.base == "echo" and shared.module == "family_task" and shared.metrics == ("echo_ld",)
    assert registry.base_task("echo_shared").name == "echo"
    # the built-in condition is the same derivation of its task's spec
    assert vocab.shared_spec(registry.task("facts")) == registry.task(registry.task("facts").shared)


def test_a_shared_condition_without_its_builder_is_refused_by_name(monkeypatch):
    module = types.ModuleType("half_task")
    module.SPEC = vocab.TaskSpec("half", "half_task", ("m",), True, (), shared="half_shared")
    monkeypatch.setitem(sys.modules, "half_task", module)
    with pytest.raises(ValueError, match="'half_task'.*'half_shared'.*shared_dataset"):
        registry.load_task_modules(["half_task"])


def test_the_plan_builds_a_shared_condition_for_any_task_that_declares_one(monkeypatch):
    cfg = _config(monkeypatch, task_modules=["family_task"], tasks={"echo": {"n": 40, "n_score": 10}})
    assert views.shared_tasks(cfg) == [registry.task("facts").shared, "echo_shared"]
    assert views.models_for(cfg, "echo_shared") == ["tiny_mha", "tiny_gqa"]  # one family of two
    assert views.shared_members(cfg, "echo_shared", "tiny_gqa") == \
        ["results/data/echo/tiny_mha.parquet", "results/data/echo/tiny_gqa.parquet"]
    assert views.task_config(cfg, "echo_shared", "tiny_gqa")["n_score"] == 10
    off = _config(monkeypatch, task_modules=["family_task"], tasks={"echo": {"n": 40, "n_score": 10, "shared": False}})
    assert "echo_shared" not in views.shared_tasks(off)


def test_min_heldout_defaults_to_the_tasks_spec(monkeypatch):
    cfg = _config(monkeypatch, task_modules=["family_task", "synthetic_task"],
                  tasks={"echo": {"n": 40, "n_score": 10}, "recall": {"n": 40, "n_score": 10}})
    for t in views.dataset_tasks(cfg):
        assert views.min_heldout(cfg, t) == registry.task(t).min_heldout > 0
    cfg["curves"]["min_heldout"] = {"recall": 3}  # one task named: the others keep their spec's
    assert views.min_heldout(cfg, "recall") == 3 and views.min_heldout(cfg, "echo") == registry.task("echo").min_heldout
    assert views.min_heldout(cfg, "ioi") == 20


@pytest.mark.workflow
@pytest.mark.long(35)
def test_a_task_of_the_suite_is_scored_on_the_prompts_its_family_shares(tiny_run, tmp_path):
    """tests/plugins/family_task.py, named in task_modules, and its settings under tasks: are all
    that the tiny workflow needs to build the task per model, and to score and tabulate it on the
    prompts every model of the family kept. (A plugin task's own condition goes through the same
    score, curve and table rules: tests/workflow/test_vocab_snakemake.py scores and tabulates one.)"""
    work = copy_workflow(tmp_path / "wf")
    reuse_models(tiny_run, work)
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    for m in cfg["models"].values():
        m["ablation"] = {"kinds": ["zero"], "units": ["query"]}
    cfg.update(task_modules=["family_task"], tasks={"echo": {"n": 48, "n_score": 10, "n_curve": 12}},
               ablation={"kinds": ["zero"], "units": ["query"], "min_group": 2})
    cfg["curves"]["methods"] = ["ranked"]  # the greedy curve reads the same files; it is tested on the built-in tasks
    (work / "echo.yaml").write_text(yaml.safe_dump(cfg))
    env = smk_env(PYTHONPATH=f"{ROOT / 'src'}:{PLUGINS}")
    targets = ["results/tables/table1_echo_shared_zero-query.csv"]
    p = smk(*targets, "--cores", "2", "--configfile", "echo.yaml", cwd=work, env=env)
    ran = planned_jobs(p.stdout + p.stderr)  # the blocks Snakemake prints as it starts each job
    shared_jobs = sorted((wc["task"], wc["model"]) for rule, wc in ran if rule == "dataset_shared")
    assert shared_jobs == [("echo_shared", "tiny_gqa"), ("echo_shared", "tiny_mha")]
    assert not (work / "results" / "logs" / "models").exists(), "the tiny run's models were to be reused"
    data = {m: pl.read_parquet(work / f"results/data/echo/{m}.parquet") for m in ("tiny_mha", "tiny_gqa")}
    ids = set(data["tiny_mha"]["seq_id"]) & set(data["tiny_gqa"]["seq_id"])
    assert set(data["tiny_mha"]["seq_id"]) != set(data["tiny_gqa"]["seq_id"])  # the conditions differ
    for m in data:
        shared = pl.read_parquet(work / f"results/data/echo_shared/{m}.parquet")
        assert set(shared["seq_id"]) == ids and shared["score"].sum() == 10
        assert shared["seq_id"].to_list() == [i for i in data[m]["seq_id"] if i in ids]  # the model's order
    assert not (work / "results" / "scores" / "echo").exists()  # the own condition: built, not scored
    t1 = pl.read_csv(work / "results/tables/table1_echo_shared_zero-query.csv")
    assert sorted(t1["model"]) == ["tiny_gqa", "tiny_mha"] and "baseline_echo_ld" in t1.columns
    assert (t1["n_score_prompts"] == 10).all()
