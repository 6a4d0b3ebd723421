"""A config mistake stops the plan with one line naming the key and what was wanted: schema errors,
an unknown task, scoring prompts that leave no room, a device the jobs' torch lacks (the same through
Snakemake, and configs that run a subset of the tasks: workflow/test_config_errors_snakemake.py)."""

import re

import pytest
import yaml
from workflow_helpers import TEST_CONFIG, config_error, resolve_over_test_config

from circuitloc import runner
from circuitloc.plan.config import views

_resolve, _error = resolve_over_test_config, config_error


@pytest.mark.parametrize("layer, expected", [
    ({"tasks": {"ioi": {"n_score": "twenty"}}}, "config: tasks.ioi.n_score = 'twenty': expected an integer"),
    ({"device": "gpu"}, "config: device = 'gpu': expected one of cpu, cuda, mps"),
    ({"curves": {"threshold": 1.5}}, "config: curves.threshold = 1.5: expected at most 1"),
    ({"ablation": {"kinds": []}}, "config: ablation.kinds = []: expected at least 1 item"),
    ({"models": {"m": {"source": "hf"}}}, "config: models.m: missing the required key 'hf'"),
    ({"models": {"m": {"hf": "gpt2"}}}, "config: models.m: missing the required key 'source'"),
    ({"bootstrap": {"ci": "high"}}, "config: bootstrap.ci = 'high': expected a number"),
])
def test_a_schema_error_is_one_line_naming_the_key_the_value_and_what_was_expected(layer, expected):
    assert _error(layer) == expected


def test_every_schema_error_gets_its_own_line():
    lines = _error({"seed": -1, "tasks": {"ioi": {"n": "many"}}}).splitlines()
    assert lines == ["config: seed = -1: expected at least 0", "config: tasks.ioi.n = 'many': expected an integer"]


def test_an_unknown_task_is_named_before_the_schema_asks_for_its_keys():
    # the known tasks: the built-in ones, then those of task modules this process loaded already
    assert re.fullmatch(r"config: tasks\.iio: unknown task 'iio' \(did you mean 'ioi'\?\): expected one of ioi, "
                        r"induction, facts(, \w+)* \(a task of your own: its module in task_modules\)",
                        _error({"tasks": {"iio": {"n": 40}}}))
    assert _error({"tasks": {"facts_shared": {"n_score": 3}}}) == \
        "config: tasks.facts_shared: not a task of its own (its settings are tasks.facts)"
    assert _error({"task_modules": ["no_such_module"]}).startswith("config: task_modules: cannot import 'no_such_module'")


def test_scoring_prompts_must_leave_room_naming_both_keys():
    assert _error({"tasks": {"ioi": {"n": 40, "n_score": 41}}}) == \
        "config: tasks.ioi.n_score = 41 is more than tasks.ioi.n = 40: a task cannot score more prompts than it has"
    assert _error({"tasks": {"ioi": {"n_score": 40}}}).startswith(
        "config: tasks.ioi.n_score = 40 equals tasks.ioi.n = 40: with curves.prompts heldout")
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models["tiny_gqa"]["tasks"] = {"induction": {"n_score": 31}}
    over = {"models": models}
    assert _error(over).startswith("config: models.tiny_gqa.tasks.induction.n_score = 31 is more than tasks.induction.n = 30")
    # the paper's protocol scores and draws curves on the same prompts: n_score = n is then fine
    assert _resolve({"tasks": {"ioi": {"n_score": 40}}, "curves": {"prompts": "all"}})["tasks"]["ioi"]["n_score"] == 40


def test_a_config_may_leave_tasks_out_with_null():
    cfg = _resolve({"tasks": {"induction": None, "facts": None}})
    assert list(cfg["tasks"]) == ["ioi"] and views.dataset_tasks(cfg) == ["ioi"]


def test_a_models_tasks_name_known_tasks_and_leave_one_at_least():
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models["tiny_gqa"]["tasks"] = {"iio": None}
    assert _error({"models": models}).startswith(
        "config: models.tiny_gqa.tasks.iio: unknown task 'iio' (did you mean 'ioi'?): expected one of ioi, induction, facts")
    models["tiny_gqa"]["tasks"] = {"facts_shared": None}
    assert _error({"models": models}) == \
        "config: models.tiny_gqa.tasks.facts_shared: not a task of its own (its settings are models.tiny_gqa.tasks.facts)"
    models["tiny_gqa"]["tasks"] = {"ioi": None, "induction": None, "facts": None}
    assert _error({"models": models}) == ("config: models.tiny_gqa.tasks: leaves out every task of the run (ioi, "
                                          "induction, facts): remove the model instead")
    # a model's null for a task the run leaves out anyway changes nothing
    models["tiny_gqa"]["tasks"] = {"facts": None}
    assert views.model_tasks(_resolve({"models": models, "tasks": {"facts": None}}), "tiny_gqa") == ["ioi", "induction"]


def test_a_run_wide_task_key_under_a_model_is_an_error_not_ignored():
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models["tiny_gqa"]["tasks"] = {"facts": {"shared": False}}
    assert _error({"models": models}) == ("config: models.tiny_gqa.tasks.facts.shared: a setting of the whole "
                                          "run, not of one model: set tasks.facts.shared instead")
    models["tiny_gqa"]["tasks"] = {"facts": {"n_score": 8}}  # a per-model setting stays allowed
    assert _resolve({"models": models})["models"]["tiny_gqa"]["tasks"]["facts"] == {"n_score": 8}


def test_a_device_the_jobs_torch_lacks_stops_the_job_with_one_line(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    ran = []
    with pytest.raises(SystemExit) as e:
        runner.run(lambda **kw: ran.append(kw), device="cuda")
    assert e.value.code == 1 and not ran
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("circuitloc error: config: device = 'cuda', but this job's torch") and "set device: cpu" in err[-1]
    runner.run(lambda **kw: ran.append(kw), device="cpu")
    assert ran == [{"device": "cpu"}]


def test_the_sweeps_primary_kinds_must_be_kinds_it_runs():
    sweep = yaml.safe_load((TEST_CONFIG.parent.parent / "config" / "sweep.yaml").read_text())["sweep"]
    sweep["primary"] = {"kinds": ["zero", "mean"]}
    assert _error({"sweep": sweep, "ablation": {"kinds": ["zero"]}}) == (
        "config: sweep.primary.kinds: mean not among the sweep's ablation kinds (zero; ablation.kinds)")
    assert _resolve({"sweep": sweep, "ablation": {"kinds": ["zero", "mean"]}})["sweep"]["primary"]["kinds"] == \
        ["zero", "mean"]


def test_group_stages_needs_grouped_ablations_and_no_family_shared_condition():
    # the .test config has a two-model family with facts_shared
    assert _error({"group_stages": True}) == (
        "config: group_stages: true cannot build the family-shared condition facts_shared inside one model's job; "
        "set group_stages: false, or tasks.<task>.shared: false")
    no_shared = {"group_stages": True, "tasks": {"facts": {"shared": False}}}
    assert _error({**no_shared, "group_ablations": False}) == (
        "config: group_stages: true runs every ablation of a model in one job; it needs group_ablations: true "
        "(set one of them false)")
    assert _resolve(no_shared)["group_stages"] is True


def test_a_size_error_names_the_key_the_user_wrote_not_a_models_default_override():
    # the embedded default's toys override ioi.n_score (60): the user's own n_score = 20 > n = 10 is
    # what the error names
    from circuitloc.errors import ConfigError
    from circuitloc.plan.config.workflow_config import layered, resolve
    from workflow_helpers import ROOT

    with pytest.raises(ConfigError) as e:
        resolve(layered(ROOT, {}, [], {"tasks": {"ioi": {"n": 10, "n_score": 20}}}), ROOT)
    assert str(e.value) == "config: tasks.ioi.n_score = 20 is more than tasks.ioi.n = 10: a task cannot score more prompts than it has"


@pytest.mark.parametrize("n, relation, why", [
    (10, "is less than", "a task cannot score more prompts than it has"),
    (60, "equals", "with curves.prompts heldout no prompt is left for the curves"),
])
def test_a_size_error_from_n_alone_names_n_and_where_the_conflicting_n_score_comes_from(n, relation, why):
    # the user writes only n (with a run-wide n_score that fits it); the embedded default's toy_mha
    # overrides ioi.n_score (60): the error names the n the user wrote and says whose n_score it meets
    from circuitloc.errors import ConfigError
    from circuitloc.plan.config.workflow_config import layered, provenance, resolve
    from workflow_helpers import ROOT

    layers = (ROOT, {}, [], {"tasks": {"ioi": {"n": n, "n_score": 5}}})
    with pytest.raises(ConfigError) as e:
        resolve(layered(*layers), ROOT, provenance(*layers))
    assert str(e.value) == (
        f"config: tasks.ioi.n = {n} {relation} models.toy_mha.tasks.ioi.n_score = 60, the default config's "
        f"override of n_score for toy_mha (config/config.yaml): {why} (raise n, or set models.toy_mha.tasks.ioi.n_score)")


def test_a_size_error_from_n_alone_against_the_default_run_wide_n_score_says_so():
    from circuitloc.errors import ConfigError
    from circuitloc.plan.config.workflow_config import layered, provenance, resolve
    from workflow_helpers import ROOT

    layers = (ROOT, {}, [], {"tasks": {"ioi": {"n": 10}}})
    with pytest.raises(ConfigError) as e:
        resolve(layered(*layers), ROOT, provenance(*layers))
    assert str(e.value) == (
        "config: tasks.ioi.n = 10 is less than tasks.ioi.n_score = 20, the default config's value "
        "(config/config.yaml): a task cannot score more prompts than it has (raise n, or set tasks.ioi.n_score)")
def test_a_ranked_stop_below_the_threshold_is_refused_naming_both_keys():
    assert _error({"curves": {"ranked_stop_damage": 0.5}}) == (
        "config: curves.ranked_stop_damage = 0.5 is below curves.threshold = 0.8: a curve stopped there "
        "could miss its heads-to-threshold")
    assert _resolve({"curves": {"ranked_stop_damage": 1.0, "ranked_stop_patience": 5}})["curves"]["ranked_stop_patience"] == 5


@pytest.mark.parametrize("key", ["greedy_stop_damage", "ranked_stop_damage"])
def test_every_early_stop_below_the_threshold_is_refused_run_wide_and_per_model(key):
    """One check for every stop key (plan.config.checks.STOP_KEYS): the greedy search's stop at 0.3 changes 13
    of the tiny run's 15 greedy heads-to-80% cells, so it is refused like the ranked one, run-wide, in
    a model's own curves, and against a model's own threshold; at the threshold it is accepted."""
    why = "a curve stopped there could miss its heads-to-threshold"
    assert _error({"curves": {key: 0.3}}) == f"config: curves.{key} = 0.3 is below curves.threshold = 0.8: {why}"
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    own = {**models, "tiny_gqa": {**models["tiny_gqa"], "curves": {key: 0.5}}}
    assert _error({"models": own}) == (f"config: models.tiny_gqa.curves.{key} = 0.5 is below curves.threshold = 0.8: "
                                       f"{why}")
    stricter = {**models, "tiny_mha": {**models["tiny_mha"], "curves": {"threshold": 0.95}}}
    assert _error({"models": stricter, "curves": {key: 0.9}}) == (
        f"config: curves.{key} = 0.9 is below models.tiny_mha.curves.threshold = 0.95: {why}")
    assert _resolve({"curves": {key: 0.8}})["curves"][key] == 0.8
    assert _resolve({"models": {**models, "tiny_gqa": {**models["tiny_gqa"], "curves": {key: 1.0}}}})


def test_a_curve_job_refuses_a_greedy_stop_below_its_threshold_too():
    """The curve job's settings go through the same check (engine.settings.CurveSettings.of)."""
    from circuitloc.engine.settings import CurveSettings

    cfg = {"methods": ["ranked", "greedy"], "max_steps": 5, "control_draws": 2, "prompts": "all", "threshold": 0.8,
           "greedy_candidates": 3, "greedy_steps": 3}
    assert CurveSettings.of({**cfg, "greedy_stop_damage": 1.0}).greedy_stop_damage == 1.0
    with pytest.raises(ValueError, match=r"^curves.greedy_stop_damage = 0.3 is below curves.threshold = 0.8"):
        CurveSettings.of({**cfg, "greedy_stop_damage": 0.3})


def _sweep_with_seeds(seeds):
    sweep = yaml.safe_load((TEST_CONFIG.parent.parent / "config" / "sweep.yaml").read_text())["sweep"]
    return {"sweep": {**sweep, "seeds": seeds}}


@pytest.mark.parametrize("layer, expected", [
    ({"models": {"m": {"source": "hf", "hf": "gpt2", "device_map": "auto", "max_memory": {0: "lots"}}}},
     "config: models.m.max_memory.0 = 'lots': expected a size as accelerate reads it: a number and its unit, "
     "e.g. 70GiB, 500MiB, 1.5GB"),
    ({"models": {"m": {"source": "hf", "hf": "gpt2", "device_map": "auto", "max_memory": {"gpu0": "70GiB"}}}},
     "config: models.m.max_memory: name 'gpu0': expected a GPU index (0, 1, ...), cpu, disk or mps"),
    ({"models": {"m": {"source": "toy", "toy": {"seed": 2**40}}}},
     "config: models.m.toy.seed = 1099511627776: expected at most 2147483647"),
    ({"models": {"m": {"source": "toy", "toy": {"eval": {"seed": 2**32}}}}},
     "config: models.m.toy.eval.seed = 4294967296: expected at most 2147483647"),
    (_sweep_with_seeds([0, 2**32]), "config: sweep.seeds.1 = 4294967296: expected at most 2147483647"),
])
def test_a_bad_max_memory_or_a_huge_toy_or_sweep_seed_is_one_line_at_plan_time(layer, expected):
    """Accepted by the plan before, these failed in a job: accelerate's size parser, numpy's seeded
    sampler (a toy's held-out draws use its seed + eval.seed, which it takes up to 2^32 - 1)."""
    assert _error(layer) == expected


def test_max_memory_as_accelerate_reads_it_and_the_largest_seeds_are_accepted():
    from accelerate.utils.modeling import convert_file_size_to_int

    sizes = ["70GiB", "500MiB", "1.5GB", "64 GiB", "8Gb"]
    assert all(convert_file_size_to_int(s) > 0 for s in sizes)
    cfg = _resolve({"models": {"m": {"source": "hf", "hf": "gpt2", "device_map": "auto",
                                     "max_memory": {**{i: s for i, s in enumerate(sizes)}, "cpu": "100GiB"}},
                               "t": {"source": "toy", "toy": {"seed": 2**31 - 1, "eval": {"seed": 2**31 - 1}}}}})
    assert cfg["models"]["t"]["toy"]["seed"] == 2**31 - 1
    assert _resolve(_sweep_with_seeds([0, 2**31 - 1]))["sweep"]["seeds"] == [0, 2**31 - 1]
