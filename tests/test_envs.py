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
# Run by Snakemake itself, or only while it plans (circuitloc.plan), outside any job environment:
# not needed in envs/.
ORCHESTRATION = {"snakemake", "jsonschema"}


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


def _conda_spec(dep: str):
    """(name, packaging SpecifierSet) of a conda dependency: `name =X.Y` (conda's X.Y.*), `name >=X.Y`."""
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", dep.strip())
    name, spec = m.group(1), m.group(2).replace(" ", "")
    if re.fullmatch(r"=?[\d.]+", spec):  # =2.13 means 2.13.*
        spec = f"=={spec.lstrip('=')}.*" if spec.startswith("=") else f"=={spec}"
    return name, SpecifierSet(spec)


def _pins(env):
    deps = env["dependencies"]
    conda = {}
    for d in deps:
        if isinstance(d, str):
            name, spec = _conda_spec(d)
            conda[name] = spec
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
    assert "python" in conda and str(conda["python"]), f"{path.name}: python has no version range"
    if pip:
        assert "pip" in conda, f"{path.name}: pip packages without pip in the conda dependencies"
    for name, spec in conda.items():
        if name != "pip":
            assert str(spec), f"{path.name}: conda package {name} has no version"
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


# conda-forge's names for PyPI distributions that it packages under another name
CONDA_NAMES = {"torch": "pytorch", "matplotlib": "matplotlib-base", "seaborn": "seaborn-base",
               "huggingface-hub": "huggingface_hub"}
# Distributions that pyproject.toml leaves out on purpose: setup.sh installs torch (a CPU build
# where there is no GPU) and test_torch_pin_matches_setup_sh holds it to the env's pytorch.
NOT_IN_PYPROJECT = {"torch"}


def _env_packages():
    """{canonical PyPI name: (where, SpecifierSet)} of envs/circuitloc.yaml, conda names mapped back."""
    env = yaml.safe_load((ROOT / "envs" / "circuitloc.yaml").read_text())
    conda, pip = _pins(env)
    back = {v: k for k, v in CONDA_NAMES.items()}
    out = {canonicalize_name(back.get(n, n)): ("conda", s) for n, s in conda.items() if n not in ("python", "pip")}
    out.update({canonicalize_name(r.name): ("pip", r.specifier) for r in pip})
    return out, conda


def _third_party_imports():
    """{top-level module: [files]} of every import in src/ and workflow/scripts/ (parsed with ast, lazy
    imports inside functions included) that is neither the standard library nor circuitloc."""
    import ast
    import sys

    found = {}
    for path in sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "workflow" / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("circuitloc", "_src_path", "__future__"):
                    found.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_import_maps_to_a_package_of_the_env_and_of_pyproject():
    """An import is mapped to its distribution by the installed packages' own metadata (not by a
    table here), so a new import of a package the env lacks fails, wherever it stands."""
    from importlib.metadata import packages_distributions

    dists = packages_distributions()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    env, _ = _env_packages()
    imports = _third_party_imports()
    assert {"torch", "transformers", "polars", "yaml"} <= set(imports)  # the scan sees lazy imports too
    problems = []
    for module, files in sorted(imports.items()):
        owners = {canonicalize_name(d) for d in dists.get(module, [])}
        if not owners:
            problems.append(f"{module} ({files[0]}): no installed distribution provides it")
            continue
        if not owners & (set(env) | ORCHESTRATION):
            problems.append(f"{module} ({files[0]}): {sorted(owners)} not in envs/circuitloc.yaml")
        if not owners & (declared | NOT_IN_PYPROJECT):
            problems.append(f"{module} ({files[0]}): {sorted(owners)} not in pyproject.toml's dependencies")
    assert not problems, "\n".join(problems)


def test_pins_agree_with_pyproject():
    """Every runtime dependency of pyproject.toml is in the env, and the env's version is inside its range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env, conda = _env_packages()
    installed = {}
    from importlib.metadata import PackageNotFoundError, version

    for dep in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dep.name)
        if name in ORCHESTRATION:
            continue
        assert name in env, f"envs/circuitloc.yaml lacks {dep.name} (pyproject.toml: {dep})"
        where, spec = env[name]
        try:  # the version the tests run with must satisfy both
            installed[name] = version(dep.name)
        except PackageNotFoundError:
            continue
        assert spec.contains(installed[name], prereleases=True), \
            f"envs/circuitloc.yaml ({where}) allows {dep.name} {spec}, not the tested {installed[name]}"
        assert dep.specifier.contains(installed[name], prereleases=True), (dep, installed[name])
    declared = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    extra = sorted(set(env) - declared - NOT_IN_PYPROJECT)
    assert not extra, f"envs/circuitloc.yaml has packages pyproject.toml does not depend on: {extra}"
    # python: the env's range is pyproject's requires-python
    assert str(conda["python"]) == project["requires-python"], (str(conda["python"]), project["requires-python"])


def test_post_deploy_installs_the_pip_section():
    """A pin file holds conda packages only: the post-deploy script must bring the pip packages."""
    env = yaml.safe_load((ROOT / "envs" / "circuitloc.yaml").read_text())
    _, pip = _pins(env)
    script = (ROOT / "envs" / "circuitloc.post-deploy.sh").read_text()
    installed = re.findall(r'"([A-Za-z0-9_.-]+==[\w.]+)"', script)
    assert sorted(installed) == sorted(str(r) for r in pip)


def test_dropped_dependencies_stay_unimported():
    """pandas is a test dependency only; tqdm is not used at all (transformers brings its own)."""
    imports = _third_party_imports()
    assert "pandas" not in imports and "tqdm" not in imports, {k: imports[k] for k in ("pandas", "tqdm") if k in imports}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    assert "pandas" not in runtime and "tqdm" not in runtime
    assert "pandas" in {canonicalize_name(Requirement(d).name) for d in project["optional-dependencies"]["test"]}


def test_torch_pin_matches_setup_sh():
    """torch is not in pyproject.toml on purpose; setup.sh's CPU build and the env's pytorch agree."""
    env = yaml.safe_load((ROOT / "envs" / "circuitloc.yaml").read_text())
    conda, _ = _pins(env)
    setup = re.search(r"TORCH_VERSION=\$\{TORCH_VERSION:-([\d.]+)\}", (ROOT / "setup.sh").read_text())
    assert setup, "setup.sh: no default TORCH_VERSION"
    assert "pytorch" in conda, "envs/circuitloc.yaml: no pytorch"
    assert conda["pytorch"].contains(setup.group(1)), (setup.group(1), str(conda["pytorch"]))


def test_a_job_imports_its_own_checkouts_circuitloc(tmp_path):
    """A .venv made in another checkout has that checkout's src/ on sys.path (an editable install):
    _src_path must still put this checkout's src/ first, even when it is on the path already."""
    import subprocess
    import sys

    other = tmp_path / "other" / "src" / "circuitloc"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("WHERE = 'other'\n")
    ours = str(ROOT / "src")
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "  # the other first, ours after it
            "sys.path.insert(0, sys.argv[3]); import _src_path, circuitloc; print(circuitloc.__file__)")
    out = subprocess.run([sys.executable, "-c", code, str(other.parent), ours, str(ROOT / "workflow" / "scripts")],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(ROOT / "src" / "circuitloc" / "__init__.py"), out
