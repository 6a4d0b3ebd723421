"""The conda environments behind --use-conda: they parse, every rule that runs code names one that
exists, their pins lie inside pyproject.toml's ranges (as does the .venv the tests run with, whose
PyPI versions are newer: the three are held inside one range, not to one version) and agree with
the run requirements of the conda-forge recipes they were checked against (CONDA_FORGE below), and
the light report environment has everything the table and figure scripts import and no torch."""

import ast
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
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
# where there is no GPU) and test_torch_pin_matches_setup_sh holds it to the env's pytorch;
# datasets is transformer-lens's, in the env only so that pip keeps conda-forge's huggingface_hub
# (circuitloc.yaml's header).
NOT_IN_PYPROJECT = {"torch", "datasets"}


def _env_packages(name: str = "circuitloc.yaml"):
    """{canonical PyPI name: (where, SpecifierSet)} of envs/<name>, conda names mapped back."""
    env = yaml.safe_load((ROOT / "envs" / name).read_text())
    conda, pip = _pins(env)
    back = {v: k for k, v in CONDA_NAMES.items()}
    out = {canonicalize_name(back.get(n, n)): ("conda", s) for n, s in conda.items() if n not in ("python", "pip")}
    out.update({canonicalize_name(r.name): ("pip", r.specifier) for r in pip})
    return out, conda


def _third_party_imports():
    """{top-level module: [files]} of every import in src/ and workflow/scripts/ (parsed with ast, lazy
    imports inside functions included) that is neither the standard library nor circuitloc."""
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


# What each pin was checked against (envs/circuitloc.yaml's header says how and when): conda-forge's
# feedstock recipes for the conda packages, PyPI's metadata for the pip ones. {conda name: (the
# version the pin takes, {dependency's conda name: that recipe's run requirement on it})}, only the
# requirements on packages of these environments. A pin that moves must move with a new look at its
# recipe, here and in the header.
CONDA_FORGE = {
    "pytorch": ("2.13.0", {}),  # pytorch-cpu-feedstock recipe/meta.yaml
    "tokenizers": ("0.23.1", {"huggingface_hub": ">=0.16.4,<2.0"}),  # tokenizers-feedstock recipe/meta.yaml
    "safetensors": ("0.8.0", {}),  # safetensors-feedstock recipe/recipe.yaml
    "accelerate": ("1.13.0", {"numpy": ">=1.17", "pytorch": ">=2.0.0", "huggingface_hub": ">=0.21.0",
                              "safetensors": ">=0.4.3"}),  # accelerate-feedstock recipe/recipe.yaml
    "gguf": ("0.19.0", {"numpy": ">=1.17", "pyyaml": ">=5.1"}),  # gguf-feedstock recipe/recipe.yaml
    "huggingface_hub": ("1.27.0", {"pyyaml": ">=5.1"}),  # huggingface_hub-feedstock recipe/recipe.yaml
    "datasets": ("5.0.0", {"numpy": ">=1.17", "pyarrow": ">=21.0.0", "huggingface_hub": ">=0.25.0,<2.0",
                           "pyyaml": ">=5.1"}),  # datasets-feedstock recipe/recipe.yaml
    "numpy": ("2.4.6", {}),  # numpy-feedstock recipe/recipe.yaml (branch v2.4.x)
    "pyarrow": ("25.0.0", {"numpy": ">=1.23,<3"}),  # pyarrow-feedstock recipe/meta.yaml (run_constrained)
    "pyyaml": ("6.0.3", {}),  # pyyaml-feedstock recipe/meta.yaml
    "scipy": ("1.17.1", {"numpy": ">=1.25.2,<2.7"}),  # scipy-feedstock recipe/meta.yaml (built on numpy 2.4)
    "matplotlib-base": ("3.11.0", {"numpy": ">=1.23"}),  # matplotlib-feedstock recipe/meta.yaml
    "seaborn-base": ("0.13.2", {"numpy": ">=1.20,!=1.24.0", "matplotlib-base": ">=3.4,!=3.6.1",
                                "scipy": ">=1.7"}),  # seaborn-feedstock recipe/meta.yaml
    "tabulate": ("0.10.0", {}),  # tabulate-feedstock recipe/recipe.yaml
}
PYPI = {  # the pip sections' packages: their Requires-Dist
    "transformers": ("5.17.0", {"huggingface_hub": ">=1.5.0,<2.0", "tokenizers": ">=0.23.1,<0.24.0",
                                "safetensors": ">=0.8.0", "numpy": ">=1.17", "pyyaml": ">=5.1"}),
    "polars": ("2.1.0", {}),
    "transformer-lens": ("4.3.0", {"transformers": ">=5.9.0", "huggingface_hub": ">=0.23.2", "accelerate": ">=1.1.0",
                                   "pytorch": ">=2.6", "numpy": ">=1.24", "datasets": ">=2.7.1"}),
}
# conda-forge's newest versions of what the pip sections take from PyPI, and why they do not do
TOO_OLD_ON_CONDA_FORGE = {  # transformers-feedstock and polars-feedstock recipe/recipe.yaml
    "transformers": ("5.15.1", "no GgufConfig (models/gguf.py), new in 5.17.0"),
    "polars": ("1.41.2", "no read_csv(empty_string_is_null=) (tasks/facts.py), new in 1.43"),
}


def _chosen(env_name: str = "circuitloc.yaml") -> dict:
    """{conda name: the version the env takes}: the recorded recipe's for a conda pin (which must
    admit it), the == version for a pip one."""
    env = yaml.safe_load((ROOT / "envs" / env_name).read_text())
    conda, pip = _pins(env)
    out = {}
    for name, spec in conda.items():
        if name in ("python", "pip"):
            continue
        assert name in CONDA_FORGE, f"envs/{env_name}: {name} has no recorded conda-forge recipe (CONDA_FORGE)"
        version = CONDA_FORGE[name][0]
        assert spec.contains(version), \
            f"envs/{env_name}: {name} {spec} does not admit {version}, the version its recipe was checked at"
        out[name] = version
    for req in pip:
        name = CONDA_NAMES.get(canonicalize_name(req.name), canonicalize_name(req.name))
        assert name in PYPI, f"envs/{env_name}: pip's {req} has no recorded requirements (PYPI)"
        version = next(iter(req.specifier)).version
        assert version == PYPI[name][0], (req, PYPI[name][0])
        out[name] = version
    return out


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.name)
def test_pins_meet_each_recipes_run_requirements(path):
    """Mutually consistent: each package's recorded run requirements hold for the versions the env takes."""
    chosen = _chosen(path.name)
    problems = []
    for name, version in chosen.items():
        requires = (CONDA_FORGE if name in CONDA_FORGE else PYPI)[name][1]
        for dep, spec in requires.items():
            if dep in chosen and not SpecifierSet(spec).contains(chosen[dep]):
                problems.append(f"{name} {version} needs {dep} {spec}; the env takes {dep} {chosen[dep]}")
    assert not problems, "\n".join(problems)


def test_pip_takes_only_what_conda_forge_lacks():
    """A pip package that conda-forge has must say why conda-forge's will not do, and conda-forge's
    newest must really be below what pyproject.toml asks for."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(d).name): Requirement(d) for d in project["dependencies"]}
    for name in PYPI:
        if name == "transformer-lens":  # no feedstock at all
            continue
        assert name in TOO_OLD_ON_CONDA_FORGE, f"{name} comes from pip: say why conda-forge's will not do"
        newest, _ = TOO_OLD_ON_CONDA_FORGE[name]
        assert not declared[name].specifier.contains(newest), \
            f"conda-forge's {name} {newest} is inside pyproject.toml's {declared[name]}: take it from conda-forge"


def test_pins_agree_with_pyproject():
    """Every runtime dependency of pyproject.toml is in the env; the version the env takes and the
    version the tests run with (.venv) both lie inside pyproject.toml's range (they need not be equal)."""
    from importlib.metadata import PackageNotFoundError, version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env, conda = _env_packages()
    chosen = _chosen()
    back = {v: k for k, v in CONDA_NAMES.items()}
    chosen = {canonicalize_name(back.get(n, n)): v for n, v in chosen.items()}
    problems = []
    for dep in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dep.name)
        if name in ORCHESTRATION:
            continue
        assert name in env, f"envs/circuitloc.yaml lacks {dep.name} (pyproject.toml: {dep})"
        if not dep.specifier.contains(chosen[name], prereleases=True):
            problems.append(f"envs/circuitloc.yaml takes {dep.name} {chosen[name]}, outside pyproject.toml's {dep}")
        try:
            tested = version(dep.name)
        except PackageNotFoundError:
            continue
        if not dep.specifier.contains(tested, prereleases=True):
            problems.append(f"the tests run {dep.name} {tested}, outside pyproject.toml's {dep}")
    assert not problems, "\n".join(problems)
    declared = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    extra = sorted(set(env) - declared - NOT_IN_PYPROJECT)
    assert not extra, f"envs/circuitloc.yaml has packages pyproject.toml does not depend on: {extra}"
    # python: the env's range is pyproject's requires-python
    assert str(conda["python"]) == project["requires-python"], (str(conda["python"]), project["requires-python"])


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.name)
def test_post_deploy_installs_the_pip_section(path):
    """A pin file holds conda packages only: the post-deploy script must bring the pip packages."""
    env = yaml.safe_load(path.read_text())
    _, pip = _pins(env)
    deploy = path.with_name(path.stem + ".post-deploy.sh")
    if not pip:
        return
    assert deploy.is_file(), f"{path.name} has a pip section but no {deploy.name}"
    installed = re.findall(r'"([A-Za-z0-9_.-]+==[\w.]+)"', deploy.read_text())
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


# The table, figure, analysis, sweep and cost scripts: they read results and write tables and
# figures, in the light envs/report.yaml (and so does any script of a rule that names it).
REPORT_SCRIPTS = ("tables", "figures", "fig_scale", "robustness", "specificity_table", "stability", "sweep_tables",
                  "sweep_overview", "cost_table", "claims")
# what report.yaml must not have: the model stack (PyPI names)
MODEL_STACK = {"torch", "transformers", "transformer-lens", "tokenizers", "safetensors", "accelerate", "gguf",
               "huggingface-hub", "datasets"}
# imported in those scripts' modules only inside functions that no table or figure job calls
REPORT_LAZY = {"torch": "runner.setup, only given threads= (a model job's)",
               "transformers": "runner.setup, only given threads= (silences a model job's loading bars)"}


def _report_scripts():
    scripts = {ROOT / "workflow" / "scripts" / f"{s}.py" for s in REPORT_SCRIPTS}
    for smk, _, body in _rules():
        conda = re.search(r"^\s+conda:\s*\n\s+\"([^\"]+)\"", body, flags=re.M)
        script = re.search(r"^\s+script:\s*\n\s+\"([^\"]+)\"", body, flags=re.M)
        if conda and script and (smk.parent / conda.group(1)).resolve() == ROOT / "envs" / "report.yaml":
            scripts.add((smk.parent / script.group(1)).resolve())
    return sorted(s for s in scripts if s.is_file())


def _scoped_imports(tree, in_function=False):
    """(top-level module, runs at import time) of every absolute import in the tree; one inside a
    function body runs only when the function does."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name.split(".")[0], not in_function
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.module.split(".")[0], not in_function
        else:
            yield from _scoped_imports(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                              ast.Lambda)))


def test_report_env_has_what_the_table_and_figure_scripts_import():
    """Every third-party import in the code of the table and figure scripts (each script and every
    circuitloc module it reaches, codehash's closure) is a package of envs/report.yaml, but for
    REPORT_LAZY's imports inside functions those jobs never call; and those scripts call setup()
    without threads=, the one way runner.setup imports torch."""
    import sys
    from importlib.metadata import packages_distributions

    from circuitloc.plan.jobs.codehash import closure

    dists = packages_distributions()
    env, _ = _env_packages("report.yaml")
    scripts = _report_scripts()
    assert len(scripts) >= 9, scripts
    problems, trees = [], {}
    for script in scripts:
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup" and \
                    any(k.arg == "threads" for k in node.keywords):
                problems.append(f"{script.name}: setup(threads=...) imports torch")
        for key, path in closure(script).items():
            if path not in trees:  # the scripts share most of their closures: each module parsed once
                trees[path] = ast.parse(path.read_text())
            for top, eager in _scoped_imports(trees[path]):
                if top in sys.stdlib_module_names or top in ("circuitloc", "_src_path", "__future__"):
                    continue
                owners = {canonicalize_name(d) for d in dists.get(top, [])}
                if owners & set(env):
                    continue
                if top in REPORT_LAZY and not eager:
                    continue
                problems.append(f"{script.name} reaches {key}, which imports {top} ({sorted(owners) or 'unknown'})"
                                f"{'' if eager else ' in a function'}: not in envs/report.yaml")
    assert not problems, "\n".join(problems)


def test_report_env_is_light_and_pinned_like_the_model_env():
    """No torch nor the rest of the model stack; only pyproject.toml's dependencies; every package
    pinned exactly as in circuitloc.yaml (a table comes out the same from either environment)."""
    report, report_conda = _env_packages("report.yaml")
    model, model_conda = _env_packages("circuitloc.yaml")
    assert "torch" not in report and "pytorch" not in report_conda
    assert not set(report) & MODEL_STACK, sorted(set(report) & MODEL_STACK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}
    assert set(report) <= declared, sorted(set(report) - declared)
    for name, (where, spec) in report.items():
        assert name in model, f"envs/report.yaml has {name}, envs/circuitloc.yaml does not"
        assert (where, str(spec)) == (model[name][0], str(model[name][1])), (name, where, str(spec), model[name])
    assert str(report_conda["python"]) == str(model_conda["python"])


def test_report_scripts_import_without_the_model_stack(tmp_path):
    """What each table and figure script imports at its top, and runner.setup() as they call it,
    run with the model stack not installed: a site directory of the .venv's packages but those."""
    import subprocess
    import sys
    import sysconfig

    blocked = {d.replace("-", "_") for d in MODEL_STACK}  # their modules: torch, transformer_lens, huggingface_hub, ...
    assert set(REPORT_LAZY) <= blocked
    site = tmp_path / "site"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name not in blocked and not (entry.suffix == ".py" and entry.stem in blocked):
            (site / entry.name).symlink_to(entry)
    code = (f"import site, sys\nsite.addsitedir({str(site)!r})\n"
            f"for m in {sorted(blocked)!r}:\n"
            "    try:\n        __import__(m)\n    except ImportError:\n        pass\n"
            "    else:\n        raise SystemExit(f'{m} is still importable')\n")
    for script in _report_scripts():  # one process (each costs seconds of imports): a failure names its script
        tree = ast.parse(script.read_text())
        imports = ast.unparse(ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], []))
        code += (f"sys.path.insert(0, {str(script.parent)!r})\nprint({script.name!r}, flush=True)\n{imports}\n"
                 "from circuitloc.runner import setup\nsetup()\n")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, f"after {out.stdout.split()[-1:]}:\n{out.stderr[-2000:]}"
    assert len(out.stdout.split()) == len(_report_scripts())


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
