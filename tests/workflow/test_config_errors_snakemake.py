"""Config mistakes and subsets through Snakemake's dry run: the snakemake command prints the one
line without a traceback, an unknown ablation kind is refused at plan time, and a config may run a
subset of the tasks (the messages themselves: unit/test_config_errors.py)."""

import pytest
import yaml
from workflow_helpers import TEST_CONFIG, config_error, planned_jobs, resolve_over_test_config, smk


_resolve, _error = resolve_over_test_config, config_error


def test_the_snakemake_command_prints_the_line_without_a_traceback(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("tasks:\n  ioi:\n    n_score: twenty\n")
    p = smk("-n", "--configfile", str(cfg), check=False)
    assert p.returncode != 0
    out = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("config:") or "Traceback" in ln
           or ln.startswith("  File")]
    assert out == ["config: tasks.ioi.n_score = 'twenty': expected an integer"]


def test_a_one_task_config_plans_only_that_tasks_jobs(tmp_path):
    cfg = tmp_path / "ioi_only.yaml"
    layer = yaml.safe_load(TEST_CONFIG.read_text())
    layer["tasks"].update(induction=None, facts=None)
    cfg.write_text(yaml.safe_dump(layer))
    jobs = planned_jobs(smk("-n", "--configfile", str(cfg)).stdout)
    tasks = {wc["task"] for _, wc in jobs if "task" in wc}
    assert tasks == {"ioi"}
    rules = {rule.split("__")[0] for rule, _ in jobs}
    assert {"dataset", "scores", "curves", "tables", "figures", "stability", "specificity"} <= rules
    assert "dataset_shared" not in rules


def test_a_model_may_leave_a_task_out_and_the_others_still_run_it(tmp_path):
    cfg = tmp_path / "gqa_no_induction.yaml"
    layer = yaml.safe_load(TEST_CONFIG.read_text())
    layer["models"]["tiny_gqa"]["tasks"] = {"induction": None}
    cfg.write_text(yaml.safe_dump(layer))
    jobs = planned_jobs(smk("-n", "--configfile", str(cfg)).stdout)
    induction = {wc["model"] for _, wc in jobs if wc.get("task") == "induction" and "model" in wc}
    assert induction == {"tiny_mha"}
    ioi = {wc["model"] for _, wc in jobs if wc.get("task") == "ioi" and "model" in wc}
    assert ioi == {"tiny_mha", "tiny_gqa"}
    rules = {rule.split("__")[0] for rule, wc in jobs if wc.get("task") == "induction"}
    assert {"dataset", "scores", "curves", "tables", "stability"} <= rules


def test_an_unknown_ablation_kind_is_one_line_at_plan_time_at_any_depth(tmp_path):
    # the built-in kinds first; a kind another test of this process registered may follow them
    said = "config: ablation.kinds: unknown kind 'meen' (did you mean 'mean'?): expected one of zero, mean, resample"
    own = "(a kind of your own: its module in task_modules)"
    got = _error({"ablation": {"kinds": ["meen"]}})
    assert got.startswith(said) and got.endswith(own), got
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models["tiny_gqa"]["ablation"] = {"kinds": ["zero", "resampel"]}
    assert _error({"models": models}).startswith(
        "config: models.tiny_gqa.ablation.kinds: unknown kind 'resampel' (did you mean 'resample'?)")
    cfg = tmp_path / "meen.yaml"
    cfg.write_text("ablation:\n  kinds: [meen]\n")
    p = smk("-n", "--configfile", str(cfg), check=False)
    text = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in text and "File " not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("config:")]
    assert len(lines) == 1 and lines[0].startswith(said) and lines[0].endswith(own), text


def test_a_run_config_with_its_own_models_runs_the_tasks_it_names_only(tmp_path):
    # the README's "Your own model" shape: own models:, one task
    layer = yaml.safe_load(TEST_CONFIG.read_text())
    layer["tasks"] = {"ioi": layer["tasks"]["ioi"]}
    cfg = tmp_path / "own.yaml"
    cfg.write_text(yaml.safe_dump(layer))
    jobs = planned_jobs(smk("-n", "--configfile", str(cfg)).stdout)
    assert {wc["task"] for _, wc in jobs if "task" in wc} == {"ioi"}
    # the task it names still merges onto the default's settings (n_curve from the default)
    from circuitloc.plan.config.workflow_config import layered, resolve
    from workflow_helpers import ROOT

    own = resolve(layered(ROOT, {}, [str(cfg)]), ROOT)
    assert list(own["tasks"]) == ["ioi"]
    # an overlay without models keeps every task; a run config that only removes one keeps the rest
    assert list(_resolve({"tasks": {"facts": {"metric": "accuracy"}}})["tasks"]) == ["ioi", "induction", "facts"]
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    assert list(_resolve({"models": models, "tasks": {"facts": None}})["tasks"]) == ["ioi", "induction"]


def test_a_size_error_through_snakemake_names_the_n_the_user_wrote(tmp_path):
    # only n written: the conflicting n_score is the embedded default's override for toy_mha
    cfg = tmp_path / "small_n.yaml"
    cfg.write_text("tasks:\n  ioi: {n: 10, n_score: 5}\n")
    p = smk("-n", "--configfile", str(cfg), check=False)
    assert p.returncode != 0
    out = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("config:")]
    assert out == ["config: tasks.ioi.n = 10 is less than models.toy_mha.tasks.ioi.n_score = 60, the default "
                   "config's override of n_score for toy_mha (config/config.yaml): a task cannot score more prompts "
                   "than it has (raise n, or set models.toy_mha.tasks.ioi.n_score)"]


def _tiny_models(**toy_changes):
    """The tiny config's two stored toys, tiny_mha's toy block changed by `toy_changes`."""
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    return {**models, "tiny_mha": {**models["tiny_mha"], "toy": {**models["tiny_mha"]["toy"], **toy_changes}}}


def _bad_inputs(tmp):
    """Issue 65's bad inputs that the plan can see, each as a layer over the tiny config."""
    import polars as pl

    old = tmp / "old.parquet"
    pl.DataFrame({"ioi_sentences_old": ["a"]}).write_parquet(old)
    sweep = yaml.safe_load((TEST_CONFIG.parent.parent / "config" / "sweep.yaml").read_text())["sweep"]
    hf = {"source": "hf", "hf": "gpt2", "device_map": "auto"}
    return {
        "missing facts file": {"tasks": {"facts": {"path": str(tmp / "gone.tsv")}}},
        "missing IOI parquet": {"tasks": {"ioi": {"source": {"kind": "fahamu", "path": str(tmp / "gone.parquet")}}}},
        "missing toy checkpoint": {"models": _tiny_models(checkpoint=str(tmp / "gone"))},
        "IOI parquet column as a substring": {"tasks": {"ioi": {"source": {"kind": "fahamu", "path": str(old)}}}},
        "greedy stop below the threshold": {"curves": {"greedy_stop_damage": 0.3}},
        "a model's own stop below the threshold": {
            "models": {**_tiny_models(), "tiny_gqa": {**_tiny_models()["tiny_gqa"], "curves": {"greedy_stop_damage": 0.5}}}},
        "bad max_memory size": {"models": {"m": {**hf, "max_memory": {0: "lots"}}}},
        "bad max_memory name": {"models": {"m": {**hf, "max_memory": {"gpu0": "70GiB"}}}},
        "huge toy seed": {"models": {"m": {"source": "toy", "toy": {"seed": 2**40}}}},
        "huge toy eval seed": {"models": {"m": {"source": "toy", "toy": {"eval": {"seed": 2**32}}}}},
        "huge sweep seed": {"sweep": {**sweep, "seeds": [0, 2**32]}},
    }


BAD_INPUTS = ["missing facts file", "missing IOI parquet", "missing toy checkpoint", "IOI parquet column as a substring",
              "greedy stop below the threshold", "a model's own stop below the threshold", "bad max_memory size",
              "bad max_memory name", "huge toy seed", "huge toy eval seed", "huge sweep seed"]


@pytest.mark.workflow
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_the_tiny_run_with_a_bad_input_ends_in_one_line(tmp_path, case):
    """The tiny config with each bad input of issue 65 that the plan can see: the snakemake command
    stops before any job with the plan's one line (as the plan gives it here: config_error), and
    no traceback. (Those only a job meets: an MLP width config.json does not match,
    models/test_weights.py; a full disk and an interrupted job, unit/test_faults.py.)"""
    cases = _bad_inputs(tmp_path)
    assert list(cases) == BAD_INPUTS
    layer = cases[case]
    expected = config_error(layer)
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(layer))
    p = smk("-n", "--configfile", str(TEST_CONFIG), str(cfg), check=False)
    said = (p.stdout + p.stderr).splitlines()
    assert p.returncode != 0 and expected in said, said[-20:]
    assert not [ln for ln in said if "Traceback" in ln or ln.startswith("  File")], said[-20:]
    assert [ln for ln in said if ln == expected or ln.startswith(("config:", "circuitloc"))] == [expected]
    assert planned_jobs(p.stdout) == []
