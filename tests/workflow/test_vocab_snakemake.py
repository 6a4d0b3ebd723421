"""A task defined outside circuitloc (tests/plugins/synthetic_task.py) runs through the workflow: the
tiny run scores and tabulates it (the vocabulary's rules: unit/test_vocab.py)."""

import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, reuse_models, smk, smk_env


@pytest.mark.workflow
@pytest.mark.long(25)
def test_a_task_of_the_test_suite_runs_through_the_workflow(tiny_run, tmp_path):
    """tests/plugins/synthetic_task.py defines a task (its spec, dataset builder and metric) and
    nothing else changes: the tiny workflow builds its dataset, scores it, draws its curves and
    writes its Table 1 and Table 2, named after the task and its metric."""
    work = copy_workflow(tmp_path / "wf")
    reuse_models(tiny_run, work, ["tiny_gqa"])
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    cfg["models"] = {"tiny_gqa": {**cfg["models"]["tiny_gqa"], "ablation": {"kinds": ["zero"], "units": ["query"]}}}
    cfg.update(task_modules=["synthetic_task"], tasks={"recall": {"n": 40, "n_score": 12, "n_curve": 20}},
               analysis=["stability"])
    (work / "recall.yaml").write_text(yaml.safe_dump(cfg))
    env = smk_env(PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'tests' / 'plugins'}")
    smk("results/tables/table1_recall_zero-query.csv", "results/tables/table2_recall_zero-query.csv",
        "results/tables/stability_recall.csv", "--cores", "2", "--configfile", "recall.yaml", cwd=work, env=env)
    assert not (work / "results" / "logs" / "models").exists(), "the tiny run's model was to be reused"
    import polars as pl

    t1 = pl.read_csv(work / "results/tables/table1_recall_zero-query.csv")
    assert t1["model"].to_list() == ["tiny_gqa"] and "baseline_recall_ld" in t1.columns
    assert t1["top_head"][0].startswith("L") and t1["n_score_prompts"][0] == 12 and t1["n_curve_prompts"][0] == 20
    scores = pl.read_parquet(work / "results/scores/recall/tiny_gqa/zero-query.parquet")
    assert len(scores) == 16 and scores["metric"][0] == "recall_ld"
    t2 = pl.read_csv(work / "results/tables/table2_recall_zero-query.csv")
    assert t2["sign_flip"].is_null().all()  # the spec asks for no sign-flip check
    st = pl.read_csv(work / "results/tables/stability_recall.csv")
    assert st["split"].to_list() == ["sequence length"]
    # an unknown task name in the config is refused by name
    cfg["tasks"] = {"recal": {"n": 40, "n_score": 12}}
    (work / "typo.yaml").write_text(yaml.safe_dump(cfg))
    out = smk("-n", "--configfile", "typo.yaml", cwd=work, env=env, check=False)
    assert out.returncode != 0 and "unknown task 'recal'" in out.stdout + out.stderr
