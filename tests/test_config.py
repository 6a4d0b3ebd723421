"""Defaults live in config/schema.yaml: the workflow reads them from the validated config, so a
key a user leaves out means the schema's value, and a model's own block overrides only what it names."""

from pathlib import Path

import yaml
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
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
