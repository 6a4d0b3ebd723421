"""The plan's config views (circuitloc.plan: views, targets, groups, inputs, workflow_config) called
on plain dicts, without Snakemake: what each job reads, how jobs are cut and ordered, which files a
run makes, and that only `prepare` changes the config or the environment."""

import copy
import os
from types import SimpleNamespace

import pytest
import yaml
from workflow_helpers import ROOT, TEST_CONFIG, resolve_over_test_config

from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import builtin_tasks
from circuitloc.plan.jobs import groups
from circuitloc.plan.jobs import inputs
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.jobs import targets
from circuitloc.plan.config import views
from circuitloc.plan.config.workflow_config import as_layer, layered, prepare, resolve


def _config(**layer):
    """The .test config resolved as the Snakefile would (the default below it), with `layer` on top."""
    return resolve_over_test_config(layer or None)


def test_prepare_replaces_snakemakes_config_in_place_and_sets_the_task_modules_for_jobs(monkeypatch):
    monkeypatch.delenv(registry.TASK_MODULES_ENV, raising=False)
    config = {"left": "over"}
    workflow = SimpleNamespace(overwrite_configfiles=[str(TEST_CONFIG)], config_settings=SimpleNamespace(config={"seed": 3}),
                  modifier=SimpleNamespace(is_main_snakefile=lambda: True))
    same = prepare(config, workflow, ROOT)
    assert same is config and "left" not in config
    assert config["seed"] == 3 and list(config["models"]) == ["tiny_mha", "tiny_gqa"]
    assert config["bootstrap"] == {"n": 200, "ci": 0.95}  # the schema's default filled in
    assert os.environ[registry.TASK_MODULES_ENV] == ""


def _leaving_out(model, *left_out) -> dict:
    """The .test models, with `model` leaving out these tasks (models.<model>.tasks.<task>: null)."""
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models[model]["tasks"] = dict.fromkeys(left_out)
    return models


@pytest.mark.parametrize("layer", [{}, {"tasks": {"induction": None, "facts": None}}, {"group_ablations": False},
                                   {"models": _leaving_out("tiny_gqa", "induction")}])
def test_a_resolved_config_resolves_to_itself_as_a_layer(layer, tmp_path):
    """What the report's `snakemake --report` reads (plan.hooks.html_report writes it as a config file): the
    run's config, as a layer on the default, plans the same run (a task the run left out stays out)."""
    cfg = _config(**layer)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(as_layer(cfg, ROOT), sort_keys=False))
    assert resolve(layered(ROOT, {}, [tmp_path / "run.yaml"]), ROOT) == cfg


@pytest.mark.parametrize("configfile", ["config/sweep.yaml", "config/sweep_capacity.yaml"])
def test_a_sweeps_resolved_config_resolves_to_itself_as_a_layer(configfile, tmp_path):
    """A sweep's expanded toys ride in the run's config with their `sweep:` record (size, KV heads,
    seed, and `also`: the other sizes a toy of the same recipe and seed stands for), and the
    report's `snakemake --report` reads them back: every record key must be one the schema knows."""
    cfg = resolve(layered(ROOT, {}, [ROOT / configfile]), ROOT)
    assert any(m.get("sweep") for m in cfg["models"].values())
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(as_layer(cfg, ROOT), sort_keys=False))
    assert resolve(layered(ROOT, {}, [tmp_path / "run.yaml"]), ROOT) == cfg


def test_a_module_gets_its_config_as_one_layer_on_the_default():
    given = yaml.safe_load(TEST_CONFIG.read_text())
    cfg = layered(ROOT, given, configfiles=["ignored.yaml"], as_module=True)
    assert list(cfg["models"]) == ["tiny_mha", "tiny_gqa"]  # its models replace the default's
    assert cfg["tasks"]["ioi"]["n"] == 40 and "max_batch_tokens" in cfg


def test_the_views_never_change_the_config():
    cfg = _config()
    before = copy.deepcopy(cfg)
    wc = SimpleNamespace(task="facts", model="tiny_gqa", ablation="zero-query")
    for t in views.dataset_tasks(cfg):
        for m in views.models_for(cfg, t):
            views.task_config(cfg, t, m)["n_score"] = -1  # a job's copy
            views.curve_config(cfg, t, m)["threshold"] = -1
    targets.all_outputs(cfg), targets.stability_entries(cfg, "facts"), inputs.dataset_inputs(cfg, "/r", wc)
    groups.job_resources(cfg, "scores")["mem_mb"](wc)
    assert cfg == before


def test_a_family_shared_task_leaves_out_families_of_one():
    cfg = _config(models={"a": {"source": "hf", "hf": "x/a", "family": "f"},
                          "b": {"source": "hf", "hf": "x/b", "family": "f"},
                          "c": {"source": "hf", "hf": "x/c", "family": "g"}})
    assert views.family_members(cfg, "a") == ["a", "b"] and views.family_members(cfg, "c") == ["c"]
    shared = registry.task("facts").shared
    assert views.models_for(cfg, "facts") == ["a", "b", "c"]
    assert views.models_for(cfg, shared) == ["a", "b"]
    assert views.shared_task(cfg, "facts") == shared and views.shared_task(cfg, "ioi") is None
    assert views.dataset_tasks(cfg) == ["ioi", "induction", "facts", shared]
    alone = _config(models={"c": {"source": "hf", "hf": "x/c"}})
    assert views.shared_task(alone, "facts") is None and shared not in views.dataset_tasks(alone)
    off = _config(tasks={"facts": {"shared": False}})
    assert views.shared_task(off, "facts") is None


def test_a_model_may_leave_a_task_out_of_its_own_runs():
    cfg = _config(models=_leaving_out("tiny_gqa", "induction"))
    assert views.model_tasks(cfg, "tiny_gqa") == ["ioi", "facts"] and views.tasks(cfg) == ["ioi", "induction", "facts"]
    assert views.models_for(cfg, "induction") == ["tiny_mha"] and views.models_for(cfg, "ioi") == ["tiny_mha", "tiny_gqa"]
    assert [e["model"] for e in targets.stability_entries(cfg, "induction")] == ["tiny_mha"] * 2
    made = targets.all_outputs(cfg)
    assert "results/tables/table1_induction_zero-query.csv" in made  # tiny_mha still runs it
    assert "results/tables/table1_induction_mean-kv.csv" not in made  # only tiny_gqa has mean-kv
    # a family-shared condition is made of the members scored on its base task: a family of one left
    shared = registry.task("facts").shared
    off = _config(models=_leaving_out("tiny_gqa", "facts"))
    assert views.family_members(off, "tiny_mha", "facts") == ["tiny_mha"] and views.models_for(off, shared) == []
    assert shared not in views.dataset_tasks(off) and views.models_for(off, "facts") == ["tiny_mha"]
    # a task that every model leaves out makes no table, figure or stability job
    both = _config(models={m: {**spec, "tasks": {"induction": None}}
                           for m, spec in _leaving_out("tiny_gqa").items()})
    assert not [f for f in targets.all_outputs(both) if "induction" in f]


def test_a_models_own_blocks_override_only_what_they_name():
    cfg = _config()
    assert views.model_ablations(cfg, "tiny_mha") == ["zero-query", "resample-query"]
    assert views.model_ablations(cfg, "tiny_gqa") == [f"{k}-{u}" for k in ("zero", "mean", "resample")
                                                      for u in ("query", "kv")]
    assert views.ablations(cfg)[:2] == ["zero-query", "resample-query"] and len(views.ablations(cfg)) == 6
    assert views.models_for(cfg, "ioi", "mean-kv") == ["tiny_gqa"]
    assert views.ablation_opts(cfg, "tiny_gqa") == {"min_group": 2, "seed": 0}
    cfg["models"]["tiny_gqa"]["tasks"] = {"ioi": {"n_score": 5}}
    cfg["models"]["tiny_gqa"]["curves"] = {"max_steps": 3}
    assert views.task_config(cfg, "ioi", "tiny_gqa")["n_score"] == 5
    assert views.task_config(cfg, "ioi", "tiny_mha")["n_score"] == 10
    curve = views.curve_config(cfg, "ioi", "tiny_gqa")
    assert curve["max_steps"] == 3 and curve["threshold"] == 0.8 and curve["n_curve"] is None
    # a dataset does not depend on the metric it is scored with; a model's build on its overrides
    assert "metric" not in views.dataset_config(cfg, "facts", "tiny_gqa")
    assert views.task_metric(cfg, registry.task("facts").shared) == "margin"
    assert set(views.model_build_spec(cfg, "tiny_gqa")) == {"source", "family", "toy"}


def test_weights_patterns_split_the_models_by_source():
    import re

    cfg = _config(models={"t.1": {"source": "toy", "toy": {}}, "h": {"source": "hf", "hf": "x/h"}})
    own, none = views.weights_pattern(cfg, True), views.weights_pattern(cfg, False)
    assert re.fullmatch(own, "t.1") and not re.fullmatch(own, "tx1") and not re.fullmatch(own, "h")
    assert re.fullmatch(none, "h")
    toys = _config()
    assert not re.fullmatch(views.weights_pattern(toys, False), "tiny_mha")  # matches nothing


def test_score_jobs_are_grouped_by_the_models_list_of_ablations():
    cfg = _config()
    got = groups.ablation_groups(cfg)
    assert got == [(views.model_ablations(cfg, "tiny_mha"), ["tiny_mha"]),
                   (views.model_ablations(cfg, "tiny_gqa"), ["tiny_gqa"])]
    assert groups.group_rule(cfg, "scores", got[0][0]) == "scores__zero_resample__query"
    assert groups.group_tag(cfg, got[0][0]) == ""
    wc = SimpleNamespace(task="ioi", model="tiny_gqa")
    assert groups.resume_dir(cfg, "scores", got[1][0])(wc) == "results/.resume/scores/ioi/tiny_gqa"
    one = _config(group_ablations=False)
    per = groups.ablation_groups(one)
    assert [a for a, _ in per] == [[a] for a in views.ablations(one)]
    assert {a[0]: m for a, m in per}["zero-query"] == ["tiny_mha", "tiny_gqa"]
    assert groups.group_tag(one, ["mean-kv"]) == os.sep + "mean-kv"
    assert groups.group_of(one, "tiny_gqa") == ["zero-query"]
    same = _config(models={"a": {"source": "hf", "hf": "x/a"}, "b": {"source": "hf", "hf": "x/b"}})
    assert groups.group_rule(same, "curves", groups.ablation_groups(same)[0][0]) == "curves"


def test_group_stages_gives_each_model_one_job_for_its_datasets_scores_and_curves():
    cfg = _config(group_stages=True, tasks={"facts": {"shared": False}})
    assert groups.ablation_groups(cfg) == []  # no score or curve rule is left for any model
    assert groups.stage_free_models(cfg) == []
    got = groups.stage_groups(cfg)
    assert got == [(views.model_tasks(cfg, "tiny_mha"), views.model_ablations(cfg, "tiny_mha"), ["tiny_mha"]),
                   (views.model_tasks(cfg, "tiny_gqa"), views.model_ablations(cfg, "tiny_gqa"), ["tiny_gqa"])]
    assert groups.stage_rule(cfg, *got[1][:2]).startswith("model_stages__ioi_induction_facts__zero_query_")
    wc = SimpleNamespace(model="tiny_gqa")
    settings = groups.stage_settings(cfg, got[1][0])(wc)
    assert settings["ioi"] == {"dataset": views.dataset_config(cfg, "ioi", "tiny_gqa"),
                               "metric": views.task_metric(cfg, "ioi"),
                               "curves": views.curve_config(cfg, "ioi", "tiny_gqa")}
    files = inputs.stage_inputs(cfg, ROOT, got[1][0])(wc)
    assert {k.split("__")[0] for k in files} == {"ioi", "facts"}  # induction reads no resource file
    # its request is the sum of the nine jobs it replaces (three tasks); without it the same models
    # get per-stage rules
    one = groups.job_resources(cfg, "model_stages")["runtime"](wc)
    parts = sum(groups.job_resources(cfg, s)["runtime"](wc) for s in ("dataset", "scores", "curves"))
    assert one == 3 * parts
    plain = _config(tasks={"facts": {"shared": False}})
    assert groups.stage_groups(plain) == [] and len(groups.ablation_groups(plain)) == 2


def test_long_jobs_come_first():
    cfg = _config(models={"toy": {"source": "toy", "toy": {}}, "real": {"source": "hf", "hf": "x/r"}})
    def p(*a, model="real"):
        got = groups.job_priority(cfg, *a)
        return got(SimpleNamespace(model=model)) if callable(got) else got

    assert p("model") > p("dataset") > p("scores", ["toy", "real"]) > p("curves", ["toy"]) > p("specificity") > 0


def test_the_costliest_pretrained_model_starts_first():
    def hf(params_b, n_layers, n_heads):
        return {"source": "hf", "hf": "x/r", "size": {"params_b": params_b, "n_layers": n_layers, "n_heads": n_heads}}

    # cost = parameters x units: "wide" (0.2 x 96) costs more than "deep" (0.1 x 120), "twin" ties "deep"
    cfg = _config(models={"toy": {"source": "toy", "toy": {}}, "big": hf(1.5, 28, 12), "deep": hf(0.1, 30, 4),
                          "wide": hf(0.2, 8, 12), "twin": hf(0.1, 30, 4)})
    assert groups.size_ranks(cfg) == {"big": 3, "deep": 0, "wide": 2, "twin": 0}
    for stage in ("scores", "curves"):
        prio = groups.job_priority(cfg, stage, ["toy", "big", "deep", "wide", "twin"])
        got = {m: prio(SimpleNamespace(model=m)) for m in ("big", "wide", "deep", "twin", "toy")}
        assert got["big"] > got["wide"] > got["deep"] == got["twin"] == got["toy"] == groups.PRIORITY["pretrained"]
        assert got["big"] < groups.job_priority(cfg, "dataset")  # datasets still unlock scores first
    many = _config(models={f"m{i}": hf(0.1 * (i + 1), 10, 10) for i in range(14)})
    assert max(groups.size_ranks(many).values()) == groups.PRIORITY["dataset"] - groups.PRIORITY["pretrained"] - 1


def test_resources_are_callables_per_job():
    cfg = _config(device="cuda", resources={"slurm_partition": "gpu"})
    res = groups.job_resources(cfg, "scores")
    assert {"mem_mb", "runtime", "gpu", "slurm_partition"} <= set(res)
    wc = SimpleNamespace(model="tiny_gqa")
    assert res["gpu"](wc) == 1 and res["slurm_partition"](wc) == "gpu"
    assert groups.job_resources(cfg, "small", per_model=False)["gpu"](wc) is None  # no GPU for a table


def test_the_default_target_has_every_table_pair_and_ends_with_the_cost_and_the_report():
    cfg = _config()
    pairs = targets.table_pairs(cfg)
    assert len(pairs) == len(views.dataset_tasks(cfg)) * len(views.ablations(cfg))  # each pair has a model
    out = targets.all_outputs(cfg)
    assert out[-2:] == [targets.COST, targets.REPORT] and len(out) == len(set(out))
    assert {f"results/tables/table1_{t}_{a}.csv" for t, a in pairs} <= set(out)
    assert f"results/tables/stability_{registry.task('facts').shared}.csv" not in out  # stability: own tasks
    inter = set(targets.intermediates(cfg))  # what the tables read: in the default target, rebuilt when deleted
    assert inter and inter <= set(out) and "results/scores/ioi/tiny_mha/zero-query.parquet" in inter
    assert targets.cost_inputs(cfg) == [f for f in out[:-2] if f not in inter]  # the tables wait for them
    assert all(f.startswith(("results/tables/", "results/figures/")) for f in targets.report_inputs(cfg))
    assert not targets.sweep_pairs(cfg) and "results/tables/sweep_overview.csv" not in out
    fewer = _config(analysis=[])
    assert not [f for f in targets.all_outputs(fewer) if "stability" in f or "robustness" in f]


def test_the_tables_read_one_file_per_scored_model_in_config_order():
    cfg = _config()
    abls = ["zero-query", "zero-kv"]
    got = targets.per_ablation_inputs(cfg, abls, {"scores": targets.SCORES, "cards": targets.CARD})(SimpleNamespace(task="ioi"))
    assert set(got) == {"scores_0", "cards_0", "scores_1", "cards_1"}
    assert got["scores_0"] == ["results/scores/ioi/tiny_mha/zero-query.parquet", "results/scores/ioi/tiny_gqa/zero-query.parquet"]
    assert got["cards_1"] == [f"results/models/{m}/card.json" for m in views.models_for(cfg, "ioi", "zero-kv")]
    assert got["scores_1"] == [f"results/scores/ioi/{m}/zero-kv.parquet" for m in views.models_for(cfg, "ioi", "zero-kv")]
    entries = targets.stability_entries(cfg, "facts")
    shared = registry.task("facts").shared
    assert len(entries) == 2 + 6 and entries[0]["shared"] == f"results/scores/{shared}/tiny_mha/zero-query.parquet"
    assert "shared" not in targets.stability_entries(cfg, "ioi")[0]
    assert len(targets.stability_files(cfg, "facts")) == len(set(targets.stability_files(cfg, "facts")))


def test_a_sweeps_toys_are_models_and_its_pairs_get_sweep_tables():
    cfg = resolve(layered(ROOT, {}, [ROOT / "config" / "sweep_capacity.yaml"]), ROOT)
    sweep = views.sweep_models(cfg)
    spec = cfg["sweep"]
    cells = sum(len(size.get("kv_heads", spec["kv_heads"])) for size in spec["sizes"].values())
    twins = sum(1 for size in spec["sizes"].values() if size.get("match_params"))  # MHA toys trained once
    assert sweep == views.models(cfg) and len(sweep) == len(spec["seeds"]) * (cells - twins)
    assert targets.sweep_pairs(cfg) == targets.table_pairs(cfg)
    assert len(targets.figure_models(cfg, "ioi", "zero-query")) == cfg["figures"]["max_models"]
    assert set(targets.sweep_members(cfg, "ioi", "zero-query")) == set(sweep)


def test_a_sweep_toy_may_not_shadow_a_configured_model():
    sweep = yaml.safe_load((ROOT / "config" / "sweep.yaml").read_text())["sweep"]
    from circuitloc.plan.config.sweep_toys import expand

    name = next(iter(expand(sweep)))
    cfg = layered(ROOT, {}, [ROOT / "config" / "sweep.yaml"], {"models": {name: {"source": "hf", "hf": "x/y"}}})
    cfg["sweep"] = sweep
    with pytest.raises(ConfigError, match=f"models.{name} clashes"):
        resolve(cfg, ROOT)


def test_inputs_name_the_resource_files_a_job_reads_relative_to_the_working_directory(monkeypatch, tmp_path):
    cfg = _config()
    monkeypatch.chdir(ROOT)
    toy = inputs.model_inputs(cfg, str(ROOT), SimpleNamespace(model="tiny_mha"))
    assert toy["facts"] == os.path.join("resources", builtin_tasks.FACTS_FILE)
    assert toy["ioi_templates"] == os.path.join("resources", "ioi", "templates.txt")
    assert any(v.startswith(".test/models/tiny_mha/") for k, v in toy.items() if k.startswith("checkpoint_"))
    hf = _config(models={"h": {"source": "hf", "hf": "x/h"}})
    assert inputs.model_inputs(hf, str(ROOT), SimpleNamespace(model="h")) == {}
    ioi = inputs.dataset_inputs(cfg, str(ROOT), SimpleNamespace(task="ioi", model="tiny_mha"))
    assert ioi["fahamu"] == ".test/ioi_fahamu.parquet" and "ioi_names" not in ioi
    assert inputs.neutral_text(cfg, str(ROOT)) == os.path.join("resources", "neutral.txt")
    assert inputs.neutral_text({**cfg, "neutral_text": "mine.txt"}, str(ROOT)) == "mine.txt"
    # a run directory elsewhere (--directory, or the workflow used as a module): still relative
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    monkeypatch.chdir(run)
    facts = inputs.model_inputs(cfg, str(ROOT), SimpleNamespace(model="tiny_mha"))["facts"]
    assert not os.path.isabs(facts) and os.path.samefile(facts, ROOT / "resources" / builtin_tasks.FACTS_FILE)
