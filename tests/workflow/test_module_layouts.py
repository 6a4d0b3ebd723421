"""circuitloc used the ways the Snakemake workflow catalog shows: as a module of a caller with a
config of its own, in snakedeploy's layout, and the template's `--directory .test`. Each plans what
the checkout plans from the same config files (a config with its own `models:` replaces the
default's: Snakemake's own merge would mix them), and without the package installed planning stops
at one line naming what to install."""

import os
import shutil
from collections import Counter

import yaml
from workflow_helpers import ROOT, copy_workflow, planned_jobs, served, smk, smk_env

PAPER = ROOT / "config" / "paper.yaml"
# the rules that only name the default target: `all`, and workflow/Snakefile's `deployed_all`
TARGET_RULES = {"all", "deployed_all"}
# what snakedeploy 0.17's deploy-workflow writes to workflow/Snakefile (its use_module.smk.jinja),
# with the module's Snakefile a local path instead of github(...), which needs the network
DEPLOYED = """from snakemake.utils import min_version


min_version("6.10.0")


configfile: "config/config.yaml"


# declare circuitloc as a module
module circuitloc:
    snakefile:
        "{snakefile}"
    config:
        config


# use all rules from circuitloc
use rule * from circuitloc
"""


def _test_config_from(root) -> dict:
    """.test/config.yaml with its files named from `root` (a run directory away from the checkout)."""
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    for spec in cfg["models"].values():
        spec["toy"]["checkpoint"] = os.path.join(root, spec["toy"]["checkpoint"])
    cfg["tasks"]["ioi"]["source"]["path"] = os.path.join(root, cfg["tasks"]["ioi"]["source"]["path"])
    return cfg


def _plan(*args, cwd) -> Counter:
    """How often each (rule, wildcards) job is planned by a dry run, the default target's rule aside."""
    jobs = planned_jobs(smk("-n", *args, cwd=cwd).stdout)
    return Counter((rule, tuple(sorted(wc.items()))) for rule, wc in jobs if rule not in TARGET_RULES)


def _models(plan: Counter) -> set:
    return {dict(wc)["model"] for _, wc in plan if "model" in dict(wc)}


def _caller(tmp_path) -> tuple:
    """A workflow of its own whose config/config.yaml names two models (the test config's toys) and
    which uses circuitloc as a module: Snakemake merges that config and a --configfile into one."""
    caller = tmp_path / "caller"
    (caller / "config").mkdir(parents=True)
    (caller / "config" / "config.yaml").write_text(yaml.safe_dump(_test_config_from(str(ROOT))))
    (caller / "Snakefile").write_text(
        'configfile: "config/config.yaml"\n\n'
        f'module circuitloc:\n    snakefile: "{ROOT / "Snakefile"}"\n    config: config\n\n'
        "use rule * from circuitloc\n")
    return caller, str(PAPER)


def _deployed(tmp_path) -> tuple:
    """snakedeploy's layout: the repository's config/ and profiles/ copied, workflow/Snakefile its module."""
    dest = tmp_path / "deployed"
    shutil.copytree(ROOT / "config", dest / "config")
    shutil.copytree(ROOT / "profiles", dest / "profiles")
    (dest / "workflow").mkdir()
    (dest / "workflow" / "Snakefile").write_text(DEPLOYED.format(snakefile=ROOT / "workflow" / "Snakefile"))
    return dest, "config/paper.yaml"  # the deployed copy


def test_a_module_caller_and_the_deployed_layout_plan_the_paper_config_as_the_checkout(tmp_path):
    """`--configfile config/paper.yaml`: the checkout, a module caller with two models of its own and
    snakedeploy's layout (the default config copied in) plan the same jobs over paper.yaml's models
    (before: 377 jobs over 6 models, 457 over 8, 476 over 9)."""
    checkout = _plan("--configfile", str(PAPER), cwd=ROOT)
    paper_models = set(yaml.safe_load(PAPER.read_text())["models"])
    assert _models(checkout) == paper_models
    for layout in (_caller, _deployed):
        cwd, paper = layout(tmp_path)
        plan = _plan("--configfile", paper, cwd=cwd)
        assert _models(plan) == paper_models, layout.__name__
        assert plan == checkout, (layout.__name__, plan - checkout, checkout - plan)


def test_the_deployed_layout_plans_the_test_overlay_as_the_checkout(tmp_path):
    """The test config over the deployed copy of the default: its toys replace the default's, so no
    value of the default's toys (their `n_score: 60` against the test config's `n: 40`) is left."""
    dest, _ = _deployed(tmp_path)
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(_test_config_from(str(ROOT))))
    checkout = _plan("--configfile", str(tmp_path / "test.yaml"), cwd=ROOT)
    assert _models(checkout) == {"tiny_mha", "tiny_gqa"}
    assert _plan("--configfile", str(tmp_path / "test.yaml"), cwd=dest) == checkout


def test_the_templates_test_call_plans_the_test_config(tmp_path):
    """`snakemake --directory .test --cores 1 -n`: .test/config/config.yaml is read (as the
    template's `configfile: "config/config.yaml"` would), so it plans what `--configfile
    .test/config.yaml` plans from the checkout, not the embedded default's jobs."""
    work = copy_workflow(tmp_path / "work")
    test_call = _plan("--directory", ".test", "--cores", "1", cwd=work)
    assert test_call == _plan("--configfile", ".test/config.yaml", cwd=work)
    assert _models(test_call) == {"tiny_mha", "tiny_gqa"}
    assert _models(_plan(cwd=work)) != _models(test_call)


def test_without_the_package_planning_names_what_to_install(tmp_path):
    """A Snakefile read from a URL (as snakedeploy's github(...) module is) where only Snakemake is
    installed: one line naming the missing package and the pip command, before anything is planned."""
    stub = tmp_path / "no_circuitloc" / "circuitloc"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'circuitloc'\", name='circuitloc')\n")
    with served(ROOT) as url:
        p = smk("-s", f"{url}/Snakefile", "-n", cwd=tmp_path, check=False,
                env=smk_env(PYTHONPATH=str(stub.parent)))
    assert p.returncode != 0
    last = (p.stdout + p.stderr).strip().splitlines()[-1]
    assert last.startswith("circuitloc: cannot import 'circuitloc'") and "pip install" in last, last
    assert "Traceback" not in p.stdout + p.stderr
