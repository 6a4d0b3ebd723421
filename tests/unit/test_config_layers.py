"""The run's config layers read before Snakemake merges them (plan.config.layers): a module caller's own
config files are layers when Snakemake merged exactly them into the module's config, the working
directory's config/config.yaml is one away from the checkout (the template's `--directory .test`),
and the files that say so agree with what they stand for. Also the catalog's set-up: the catalog
file's conda flag, and the plan's check that the jobs' Python has the package's dependencies."""

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.settings.types import ConfigSettings
from snakemake.utils import update_config

from circuitloc.plan.config.install import missing_line, missing_packages
from circuitloc.plan.config.layers import caller_files, run_layers
from circuitloc.plan.config.workflow_config import layered

ROOT = Path(__file__).resolve().parents[2]


def _workflow(settings, own_files=(), main=False):
    """What plan.config.layers reads of Snakemake's workflow object: the --configfile list, every config file
    read (the command line's first, then each `configfile:` line's), and whether it is the main one."""
    cli = list(settings.configfiles)
    return SimpleNamespace(overwrite_configfiles=cli, configfiles=cli + [str(f) for f in own_files],
                           config_settings=settings, modifier=SimpleNamespace(is_main_snakefile=lambda: main))


def _snakemakes_config(own_files, settings) -> dict:
    """The config Snakemake builds: the command line's layers, then each `configfile:` line's file
    and the command line's again (its Workflow and `configfile` directive, its own update_config)."""
    config = copy.deepcopy(settings.overwrite_config)
    for f in own_files:
        update_config(config, yaml.safe_load(Path(f).read_text()))
        if settings.overwrite_config:
            if settings.replace_workflow_config:
                config = {}
            update_config(config, settings.overwrite_config)
    return config


@pytest.fixture
def files(tmp_path):
    caller = tmp_path / "caller.yaml"
    caller.write_text("models: {a: {source: toy}}\nseed: 1\n")
    cli = tmp_path / "cli.yaml"
    cli.write_text("models: {b: {source: toy}}\ndevice: cpu\n")
    return caller, cli


def test_a_callers_merged_config_is_read_as_its_layers(files):
    caller, cli = files
    settings = ConfigSettings(configfiles=[cli], config={"seed": 2})
    given = _snakemakes_config([caller], settings)
    assert set(given["models"]) == {"a", "b"}  # what Snakemake's merge mixes
    wf = _workflow(settings, [caller])
    assert caller_files(given, wf) == [str(caller)]
    assert run_layers(given, wf, ROOT) == ([str(caller), str(cli)], False)
    # on the embedded default, each layer's own models replace the ones below: cli.yaml's alone
    assert set(layered(ROOT, given, [str(caller), str(cli)], settings.config)["models"]) == {"b"}


def test_a_config_the_caller_changed_or_gave_is_one_layer(files):
    caller, cli = files
    settings = ConfigSettings(configfiles=[cli])
    changed = {**_snakemakes_config([caller], settings), "seed": 7}
    wf = _workflow(settings, [caller])
    assert caller_files(changed, wf) is None
    assert run_layers(changed, wf, ROOT) == ([], True)
    assert run_layers({"models": {"c": {}}}, wf, ROOT) == ([], True)


def test_replace_workflow_config_drops_the_callers_files(files):
    caller, cli = files
    settings = ConfigSettings(configfiles=[cli], replace_workflow_config=True)
    given = _snakemakes_config([caller], settings)
    assert set(given["models"]) == {"b"}
    assert run_layers(given, _workflow(settings, [caller]), ROOT) == ([str(cli)], False)


def test_the_working_directorys_config_is_a_layer_away_from_the_checkout(tmp_path, monkeypatch):
    settings = ConfigSettings(configfiles=[])
    monkeypatch.chdir(ROOT)  # the checkout's config/config.yaml is the embedded default itself
    assert run_layers({}, _workflow(settings, main=True), ROOT) == ([], False)
    monkeypatch.chdir(tmp_path)
    assert run_layers({}, _workflow(settings, main=True), ROOT) == ([], False)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("seed: 3\n")
    settings = ConfigSettings(configfiles=[ROOT / "config" / "paper.yaml"])
    files, as_module = run_layers({}, _workflow(settings, main=True), ROOT)
    assert files == ["config/config.yaml", str(ROOT / "config" / "paper.yaml")] and not as_module


def test_the_template_test_config_is_the_test_config_named_from_dot_test():
    """.test/config/config.yaml (read by `--directory .test`) is .test/config.yaml with every file
    path named from .test/ instead of the checkout."""
    ours = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    template = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    for spec in template["models"].values():
        spec["toy"]["checkpoint"] = f".test/{spec['toy']['checkpoint']}"
    template["tasks"]["ioi"]["source"]["path"] = f".test/{template['tasks']['ioi']['source']['path']}"
    assert template == ours


def test_the_catalog_claims_conda_only_with_a_solved_environment():
    """`conda: true` in the catalog file only where envs/ holds a solved (pinned) environment."""
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    pinned = sorted((ROOT / "envs").glob("*.pin.txt"))
    assert usage["software-stack-deployment"]["conda"] == bool(pinned), pinned


def test_the_plan_names_the_dependencies_the_jobs_python_lacks(tmp_path):
    """pyproject.toml's dependencies checked against this Python's installed distributions: none
    missing here (the tests' environment), one that no index has named with the command to run."""
    assert missing_packages(ROOT) == []
    assert missing_line(ROOT, "python") is None
    assert missing_packages(tmp_path) == []  # no pyproject.toml: a remote Snakefile's mirror
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["PyYAML>=6", "no-such-distribution-of-circuitloc>=1", "polars"]\n')
    assert missing_packages(tmp_path) == ["no-such-distribution-of-circuitloc"]
    line = missing_line(tmp_path, "/env/bin/python")
    assert "/env/bin/python" in line and "lacks no-such-distribution-of-circuitloc:" in line
    assert f"pip install -e {tmp_path}" in line
