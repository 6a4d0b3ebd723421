"""Defaults live in config/schema.yaml: the workflow reads them from the validated config, so a
key a user leaves out means the schema's value, and a model's own block overrides only what it names
(the config through Snakemake: workflow/test_config_snakemake.py)."""

from pathlib import Path

import yaml
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = str(ROOT / "config" / "schema.yaml")


def _minimal():
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    for key in ("ablation", "bootstrap", "device", "analysis"):
        cfg.pop(key, None)
    cfg["tasks"]["facts"].pop("shared", None)
    cfg["curves"].pop("control_draws", None)
    return cfg


def test_schema_fills_the_run_wide_defaults():
    cfg = _minimal()
    validate(cfg, SCHEMA)
    assert cfg["ablation"] == {"kinds": ["zero"], "units": ["query"], "min_group": 8}
    assert cfg["bootstrap"] == {"n": 1000, "ci": 0.95}
    assert cfg["device"] == "cpu"
    assert cfg["analysis"] == ["stability", "specificity", "robustness"]
    assert cfg["tasks"]["facts"]["shared"] is True
    assert cfg["curves"]["control_draws"] == 10


def test_a_models_own_ablation_block_gets_no_defaults():
    """A default inside a model's block would silently override the run-wide value (min_group 4
    run-wide, a model naming only its units must still see 4)."""
    cfg = _minimal()
    cfg["ablation"] = {"min_group": 4, "kinds": ["zero", "mean"]}
    model = next(iter(cfg["models"]))
    cfg["models"][model]["ablation"] = {"units": ["kv"]}
    validate(cfg, SCHEMA)
    assert cfg["models"][model]["ablation"] == {"units": ["kv"]}
    assert cfg["ablation"] == {"min_group": 4, "kinds": ["zero", "mean"], "units": ["query"]}


def test_given_values_are_kept():
    cfg = _minimal()
    cfg["bootstrap"] = {"n": 200}
    validate(cfg, SCHEMA)
    assert cfg["bootstrap"] == {"n": 200, "ci": 0.95}


# ---- Layers: the default, --configfile overlays, --config k=v (circuitloc.plan.config.configload) -------------

import pytest  # noqa: E402

from circuitloc.errors import ConfigError  # noqa: E402
from circuitloc.plan.config.configload import cli_values, effective_config, merge, unknown_keys  # noqa: E402

DEFAULT = ROOT / "config" / "config.yaml"


def test_merge_is_recursive_and_lists_replace():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    out = merge(base, {"a": {"c": [3]}, "e": 2})
    assert out == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # not changed in place


def test_an_overlay_adds_to_the_default():
    default = yaml.safe_load(DEFAULT.read_text())
    cfg = effective_config(DEFAULT, [ROOT / "config" / "facts_accuracy.yaml"])
    assert cfg["tasks"]["facts"]["metric"] == "accuracy"
    assert list(cfg["models"]) == list(default["models"])  # the default's models, untouched
    cfg["tasks"]["facts"]["metric"] = default["tasks"]["facts"]["metric"]
    assert cfg == default  # nothing else changed


def test_a_config_with_its_own_models_replaces_the_defaults_models(tmp_path):
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg = effective_config(DEFAULT, [ROOT / "config" / "paper.yaml"])
    assert cfg["models"] == paper["models"]
    for name in ("sweep.yaml", "sweep_capacity.yaml", "sweep_large.yaml"):  # models: {} plus a sweep
        cfg = effective_config(DEFAULT, [ROOT / "config" / name])
        assert cfg["models"] == {} and cfg["sweep"] == yaml.safe_load((ROOT / "config" / name).read_text())["sweep"]
    # a sweep config without any models: key gets only the sweep's toys too, as before the merge
    sweep_only = tmp_path / "sweep_only.yaml"
    layer = yaml.safe_load((ROOT / "config" / "sweep.yaml").read_text())
    layer.pop("models")
    sweep_only.write_text(yaml.safe_dump(layer))
    assert effective_config(DEFAULT, [sweep_only])["models"] == {}
    # and the overlay after it adds to it, as to the default
    cfg = effective_config(DEFAULT, [ROOT / "config" / "sweep_capacity.yaml", ROOT / "config" / "facts_accuracy.yaml"])
    assert cfg["models"] == {} and cfg["tasks"]["facts"]["metric"] == "accuracy" and cfg["tasks"]["facts"]["n_score"] == 60


def test_config_values_read_as_yaml():
    """Snakemake leaves `false` a string: group_ablations=false must mean False, not 'false'."""
    cfg = effective_config(DEFAULT, [], {"group_ablations": "false", "device": "cpu", "seed": 3,
                                         "bootstrap": {"n": "200"}})
    assert cfg["group_ablations"] is False and cfg["device"] == "cpu" and cfg["seed"] == 3
    assert cfg["bootstrap"] == {"n": 200, "ci": 0.95}
    assert cli_values(["yes", "x", "1.5"]) == [True, "x", 1.5]


def test_a_bad_config_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        effective_config(DEFAULT, [bad])
    with pytest.raises(ConfigError, match="not found"):
        effective_config(DEFAULT, [tmp_path / "missing.yaml"])


SCHEMA_DOC = yaml.safe_load(Path(SCHEMA).read_text())


@pytest.mark.parametrize("where,edit", [
    ("models.toy_mha.tasks.induction", lambda c: c["models"]["toy_mha"].setdefault("tasks", {}).update(
        {"induction": {"n_scroe": 20}})),
    ("models.smollm2_135m.curves", lambda c: c["models"]["smollm2_135m"]["curves"].update({"n_scroe": 1})),
    ("models.smollm2_135m.ablation", lambda c: c["models"]["smollm2_135m"]["ablation"].update({"n_scroe": 1})),
    ("models.toy_gqa.toy", lambda c: c["models"]["toy_gqa"]["toy"].update({"n_scroe": 1})),
    ("models.toy_gqa.toy.acceptance", lambda c: c["models"]["toy_gqa"]["toy"]["acceptance"].update({"n_scroe": 1})),
    ("models.smollm2_135m.gguf", lambda c: c["models"]["smollm2_135m"]["gguf"].update({"n_scroe": 1})),
    ("models.smollm2_135m", lambda c: c["models"]["smollm2_135m"].update({"n_scroe": 1})),
    ("tasks.ioi", lambda c: c["tasks"]["ioi"].update({"n_scroe": 1})),
    ("tasks.ioi.source", lambda c: c["tasks"]["ioi"]["source"].update({"n_scroe": 1})),
    ("tasks.facts", lambda c: c["tasks"]["facts"].update({"n_scroe": 1})),
    ("curves", lambda c: c["curves"].update({"n_scroe": 1})),
    ("ablation", lambda c: c["ablation"].update({"n_scroe": 1})),
    ("bootstrap", lambda c: c["bootstrap"].update({"n_scroe": 1})),
    ("resources", lambda c: c.update({"resources": {"n_scroe": 1}})),
    ("", lambda c: c.update({"n_scroe": 1})),
    ("sweep.recipe", lambda c: c.update({"sweep": {"seeds": [0], "kv_heads": [8, 1], "sizes": {"s": {}},
                                                   "recipe": {"n_scroe": 1}}})),
    ("sweep.sizes.s", lambda c: c.update({"sweep": {"seeds": [0], "kv_heads": [8, 1], "sizes": {"s": {"n_scroe": 1}},
                                                    "recipe": {}}})),
    ("sweep.model.curves", lambda c: c.update({"sweep": {"seeds": [0], "kv_heads": [8, 1], "sizes": {"s": {}},
                                                         "recipe": {}, "model": {"curves": {"n_scroe": 1}}}})),
])
def test_an_unknown_key_is_refused_with_its_path(where, edit):
    import json

    cfg = json.loads(json.dumps(yaml.safe_load(DEFAULT.read_text())))  # no objects shared by YAML anchors
    assert unknown_keys(cfg, SCHEMA_DOC) == []
    edit(cfg)
    prefix = f"config: {where}: " if where else "config: "
    assert [m.split(" (")[0] for m in unknown_keys(cfg, SCHEMA_DOC)] == [f"{prefix}unknown key 'n_scroe'"]
    # jsonschema (Snakemake's validate) refuses it too, so the two never disagree on what is allowed
    import jsonschema

    assert any("n_scroe" in e.message for e in jsonschema.Draft202012Validator(SCHEMA_DOC).iter_errors(cfg))


def test_the_toy_recipe_schema_lists_every_trainer_key():
    from circuitloc.models.toy import DEFAULTS

    fields = SCHEMA_DOC["$defs"]["toy_fields"]["properties"]
    assert set(fields) == set(DEFAULTS) | {"checkpoint"}
    for nested in ("eval", "acceptance", "mix"):
        assert set(fields[nested]["properties"]) == set(DEFAULTS[nested]), nested


def test_every_shipped_config_is_clean():
    for path in sorted((ROOT / "config").glob("*.yaml")) + [ROOT / ".test" / "config.yaml"]:
        if path.name != "schema.yaml":
            assert unknown_keys(yaml.safe_load(path.read_text()), SCHEMA_DOC) == [], path
