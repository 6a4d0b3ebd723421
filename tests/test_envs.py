"""The conda environments behind --use-conda: they parse, every rule that runs code names one that
exists, and their pins agree with pyproject.toml (and setup.sh's torch)."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
ENVS = sorted((ROOT / "envs").glob("*.yaml"))
# Run by Snakemake itself, outside any job environment: not needed in envs/.
ORCHESTRATION = {"snakemake"}


def _rules():
    """(file, rule name, body) for every rule in rules/*.smk and the Snakefile."""
    out = []
    for smk in sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]:
        text = smk.read_text()
        starts = [m for m in re.finditer(r"^(?:local)?rule (\w+):", text, flags=re.M)]
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            # the body ends at the next unindented line
            body = re.split(r"\n(?=\S)", text[m.end():end], maxsplit=1)[0]
            out.append((smk, m.group(1), body))
    return out


def _pins(env):
    deps = env["dependencies"]
    conda = {}
    for d in deps:
        if isinstance(d, str):
            name, _, version = d.partition("=")
            conda[name.strip()] = version.strip()
    pip = [Requirement(r) for d in deps if isinstance(d, dict) for r in d.get("pip", [])]
    return conda, pip


def test_there_is_an_environment():
    assert ENVS, "envs/*.yaml: no conda environment"


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.name)
def test_environment_parses_and_is_pinned(path):
    env = yaml.safe_load(path.read_text())
    assert isinstance(env, dict) and isinstance(env.get("dependencies"), list), path
    assert env.get("channels"), f"{path.name}: no channels"
    conda, pip = _pins(env)
    assert "python" in conda and conda["python"], f"{path.name}: python is not pinned"
    if pip:
        assert "pip" in conda, f"{path.name}: pip packages without pip in the conda dependencies"
    for name, version in conda.items():
        if name != "pip":
            assert version, f"{path.name}: conda package {name} is not pinned"
    for req in pip:
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}: {req} is not pinned with =="


def test_every_rule_that_runs_code_names_an_existing_environment():
    rules = _rules()
    assert len(rules) >= 10
    checked = 0
    for smk, name, body in rules:
        runs_code = re.search(r"^\s+(script|shell|notebook|wrapper):", body, flags=re.M)
        conda = re.search(r"^\s+conda:\s*\n\s+\"([^\"]+)\"", body, flags=re.M)
        if not runs_code:
            # rule all, and the report rule (run: in Snakemake's own process)
            assert re.search(r"^\s+(run|input):", body, flags=re.M), f"{smk.name}: rule {name}"
            continue
        assert conda, f"{smk.name}: rule {name} runs code but has no conda: environment"
        env = (smk.parent / conda.group(1)).resolve()
        assert env.is_file(), f"{smk.name}: rule {name} names {conda.group(1)}, which does not exist"
        assert env.parent == ROOT / "envs", f"{smk.name}: rule {name}: environment outside envs/"
        checked += 1
    assert checked >= 10


def test_pins_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "envs" / "circuitloc.yaml").read_text())
    conda, pip = _pins(env)
    pinned = {canonicalize_name(r.name): next(iter(r.specifier)).version for r in pip}
    for dep in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dep.name)
        if name in ORCHESTRATION:
            continue
        assert name in pinned, f"envs/circuitloc.yaml does not pin {dep.name} (pyproject.toml: {dep})"
        assert dep.specifier.contains(pinned[name], prereleases=True), \
            f"envs/circuitloc.yaml pins {dep.name}=={pinned[name]}, outside pyproject.toml's {dep.specifier}"
    declared = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    extra = sorted(set(pinned) - declared)
    assert not extra, f"envs/circuitloc.yaml pins packages pyproject.toml does not depend on: {extra}"
    # python: the conda pin satisfies requires-python
    assert SpecifierSet(project["requires-python"]).contains(conda["python"] + ".0"), conda["python"]


def test_torch_pin_matches_setup_sh():
    """torch is not in pyproject.toml on purpose; setup.sh's CPU build and the env's pytorch agree."""
    env = yaml.safe_load((ROOT / "envs" / "circuitloc.yaml").read_text())
    conda, _ = _pins(env)
    setup = re.search(r"TORCH_VERSION=\$\{TORCH_VERSION:-([\d.]+)\}", (ROOT / "setup.sh").read_text())
    assert setup, "setup.sh: no default TORCH_VERSION"
    assert "pytorch" in conda, "envs/circuitloc.yaml: no pytorch"
    assert setup.group(1).startswith(conda["pytorch"]), (setup.group(1), conda["pytorch"])
