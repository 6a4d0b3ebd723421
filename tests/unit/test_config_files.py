"""What a config file may hold beyond its schema's types: a key given twice in one mapping is an
error naming the key, the line and the file (PyYAML would keep the last silently), and a model's
name, which names its directories, is a plain name."""

import re

import pytest
import yaml
from workflow_helpers import ROOT, TEST_CONFIG, config_error, resolve_over_test_config

from circuitloc.errors import ConfigError
from circuitloc.plan.config import views
from circuitloc.plan.config.configload import load_layer

_resolve, _error = resolve_over_test_config, config_error


def test_a_key_given_twice_in_one_file_is_refused_naming_the_key_and_the_file(tmp_path):
    bad = tmp_path / "twice.yaml"
    bad.write_text("tasks:\n  ioi:\n    n: 40\n    n_score: 10\n    n: 50\n")
    with pytest.raises(ConfigError, match=rf"^config file {re.escape(str(bad))}: key 'n' appears twice in one "
                                          r"mapping \(again on line 5\)$"):
        load_layer(bad)
    top = tmp_path / "top.yaml"
    top.write_text("seed: 0\nseed: 1\n")
    with pytest.raises(ConfigError, match="key 'seed' appears twice"):
        load_layer(top)
    # the same key in two mappings, and a key that overrides what a `<<:` merge brought, are fine
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: &x {n: 1, m: 2}\nb:\n  <<: *x\n  n: 3\nc: {n: 4}\n")
    assert load_layer(ok) == {"a": {"n": 1, "m": 2}, "b": {"n": 3, "m": 2}, "c": {"n": 4}}
    for f in [TEST_CONFIG, *sorted((ROOT / "config").glob("*.yaml"))]:  # the shipped configs read as before
        assert load_layer(f) == (yaml.safe_load(f.read_text()) or {}), f


@pytest.mark.parametrize("name", ["../../../escaped_model", "", "tiny{x}", "a/b", "..", "tab\tname"])
def test_a_model_name_that_is_not_a_plain_name_is_refused(name):
    error = _error({"models": {name: {"source": "hf", "hf": "gpt2"}}})
    assert error == f"config: models: name {name!r}: expected letters, digits, _, - and . only " \
                    "(a model's name names its directories)"


def test_plain_model_names_pass():
    cfg = _resolve({"models": {"pythia_1.4b": {"source": "hf", "hf": "x/y"}, "Qwen2.5-7B": {"source": "hf", "hf": "x/z"}}})
    assert views.models(cfg) == ["pythia_1.4b", "Qwen2.5-7B"]
