"""Code is a rerun trigger: each script rule's params hold the hash of the code its script runs
(circuitloc.plan.jobs.codehash), so editing that code plans its jobs and everything downstream, while an edit
of comments, docstrings or formatting plans nothing."""

import ast
import re
import shutil
import textwrap

import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, planned_jobs, smk, smk_env, stand_in_outputs

from circuitloc.plan.jobs import codehash
from circuitloc.plan.jobs.codehash import closure, code_hash
from circuitloc.plan.hooks.dag import stage_of

SCRIPTS = ROOT / "workflow" / "scripts"


# ---- the import closure, on a made-up package ------------------------------------------------------
PACKAGE = {
    "__init__.py": '"""The package."""\n',
    "io.py": "def read(p):\n    return p\n",
    "errors.py": "class E(Exception):\n    pass\n",
    "lazy.py": "VALUE = 1  # reached only through a function-local import\n",
    "core.py": textwrap.dedent('''\
        """Imports at module level and inside a function."""
        from . import errors
        from .sub import deep


        def run(x):
            """Doc."""
            from .lazy import VALUE  # a lazy import

            return x + VALUE
        '''),
    "sub/__init__.py": "",
    "sub/deep.py": "from ..io import read\n",
    "unrelated.py": "import numpy\n",
    "sub/unrelated2.py": "from ..errors import E\n",
}
SCRIPT = "import _helper  # noqa\nfrom circuitloc.core import run\n\nrun(1)\n"


@pytest.fixture
def pkg(tmp_path):
    root = tmp_path / "circuitloc"
    for name, text in PACKAGE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "job.py").write_text(SCRIPT)
    (scripts / "_helper.py").write_text("X = 1\n")
    (scripts / "other.py").write_text("from circuitloc import io\n")
    _forget_parsed_files()
    yield root, scripts / "job.py"
    _forget_parsed_files()


def _forget_parsed_files():
    """codehash parses each file once per process: forget them after a test edits sources."""
    for cached in (codehash._parse, codehash._deps, codehash._closure):
        cached.cache_clear()


def _hash_after(pkg, rel, edit):
    root, script = pkg
    path = root / rel if not rel.startswith("script:") else script.parent / rel[len("script:"):]
    before = code_hash(script, root)
    path.write_text(edit(path.read_text()))
    _forget_parsed_files()
    return before, code_hash(script, root)


def test_closure_follows_lazy_and_relative_imports(pkg):
    root, script = pkg
    assert set(closure(script, root)) == {
        "script:job.py", "local:_helper", "circuitloc/__init__.py", "circuitloc/core.py", "circuitloc/errors.py",
        "circuitloc/lazy.py",  # from a function-local import
        "circuitloc/sub/__init__.py", "circuitloc/sub/deep.py",  # from .sub import deep
        "circuitloc/io.py",  # from ..io import read, in sub/deep.py
    }  # not unrelated.py, sub/unrelated2.py (nobody imports them) nor numpy (not circuitloc)
    assert set(closure(script.parent / "other.py", root)) == {"script:other.py", "circuitloc/__init__.py",
                                                                "circuitloc/io.py"}


@pytest.mark.parametrize("rel, edit", [
    ("lazy.py", lambda t: t.replace("# reached", "# still reached")),  # a comment
    ("core.py", lambda t: t.replace('"""Doc."""', '"""Another docstring."""')),  # a docstring
    ("core.py", lambda t: t.replace("return x + VALUE", "return (\n        x\n        + VALUE\n    )")),  # layout
    ("core.py", lambda t: t.replace("\n\n\ndef run", "\n\ndef run")),  # blank lines
    ("__init__.py", lambda t: t.replace("The package.", "The package, documented.")),
    ("unrelated.py", lambda t: t + "Y = 2\n"),  # code outside the closure
    ("sub/unrelated2.py", lambda t: t + "Y = 2\n"),
])
def test_edits_that_keep_the_hash(pkg, rel, edit):
    before, after = _hash_after(pkg, rel, edit)
    assert before == after


@pytest.mark.parametrize("rel, edit", [
    ("lazy.py", lambda t: t.replace("VALUE = 1", "VALUE = 2")),  # only reached lazily
    ("io.py", lambda t: t.replace("return p", "return [p]")),  # two relative hops away
    ("core.py", lambda t: t.replace("x + VALUE", "VALUE + x")),
    ("__init__.py", lambda t: t + "X = 1\n"),  # a package __init__ runs on import
    ("script:job.py", lambda t: t.replace("run(1)", "run(2)")),  # the script itself
    ("script:_helper.py", lambda t: t.replace("X = 1", "X = 2")),
])
def test_code_edits_change_the_hash(pkg, rel, edit):
    before, after = _hash_after(pkg, rel, edit)
    assert before != after


def test_a_file_that_does_not_parse_is_hashed_by_its_bytes(pkg):
    before, after = _hash_after(pkg, "lazy.py", lambda t: t + "def (:\n")
    assert before != after


def test_the_store_gives_what_parsing_gives(pkg, tmp_path, monkeypatch):
    """Digests and imports kept across processes (codehash.STORE, keyed by a file's bytes) give the
    hash a fresh parse gives, without parsing; a file edited since is parsed again."""
    root, script = pkg
    monkeypatch.setattr(codehash, "STORE", tmp_path / "store.json")
    codehash._stored.cache_clear()
    fresh = code_hash(script, root)
    assert codehash.STORE.is_file()

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a file the store holds")

    codehash._stored.cache_clear()  # as a new process: only the file
    _forget_parsed_files()
    with monkeypatch.context() as m:
        m.setattr(codehash.ast, "parse", no_parse)
        assert code_hash(script, root) == fresh
        assert closure(script, root)["circuitloc/lazy.py"] == root / "lazy.py"  # imports from the store too
    (root / "lazy.py").write_text("VALUE = 2\n")
    codehash._stored.cache_clear()
    _forget_parsed_files()
    edited = code_hash(script, root)
    monkeypatch.setattr(codehash, "STORE", tmp_path / "none" / "store.json")  # unwritable: parsed, not stored
    (tmp_path / "none").write_text("a file, not a folder")
    codehash._stored.cache_clear()
    _forget_parsed_files()
    assert code_hash(script, root) == edited != fresh
    codehash._stored.cache_clear()


def test_real_scripts_closure_parses_each_file_once():
    """Every workflow script's closure is found in one pass over the package, each file parsed once
    (counted, not timed: a wall-clock bound failed on a loaded machine)."""
    _forget_parsed_files()
    hashes = {s.name: code_hash(s) for s in SCRIPTS.glob("*.py") if s.name != "_src_path.py"}
    files = {f for s in SCRIPTS.glob("*.py") if s.name != "_src_path.py" for f in closure(s).values()}
    assert codehash._parse.cache_info().misses == len(files)  # each file parsed once per process
    assert len(set(hashes.values())) == len(hashes)  # each script is in its own hash
    # the toy trainer, every module of it, is in the model stage's closure (lazily imported)
    toy = {f"circuitloc/models/toy/{p.name}" for p in (ROOT / "src" / "circuitloc" / "models" / "toy").glob("*.py")}
    assert len(toy) > 1 and toy <= set(closure(SCRIPTS / "build_model.py"))
    assert set(closure(SCRIPTS / "cost_table.py")) >= {"circuitloc/report/tables/cost.py", "local:_src_path"}
    assert "circuitloc/report/figures/plots.py" not in closure(SCRIPTS / "cost_table.py")


def test_every_script_rule_has_its_code_as_a_param():
    for smk_file in sorted((ROOT / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule \w+:)", smk_file.read_text()):
            script = re.search(r'    script:\n\s+"\.\./workflow/scripts/([\w.]+)"', block)
            if script:
                assert f'        code=code_version("{script.group(1)}"),' in block, \
                    f"{smk_file.name}: {block.splitlines()[0]} lacks code=code_version(\"{script.group(1)}\")"


def test_the_profiles_keep_the_params_rerun_trigger():
    for cfg in (ROOT / "profiles").glob("*/config.y*ml"):
        triggers = (yaml.safe_load(cfg.read_text()) or {}).get("rerun-triggers")
        assert triggers is None or "params" in triggers, cfg


# ---- the workflow: editing the code a stage runs plans that stage and what follows ----------------
CONFIG = {
    "seed": 0, "device": "cpu", "max_batch_tokens": 4096,
    "models": {
        "tiny": {"source": "toy", "family": "toy",
                 "toy": {"n_layers": 1, "d_model": 32, "n_heads": 2, "n_kv_heads": 2, "steps": 1}},
        "hf_a": {"source": "hf", "hf": "EleutherAI/pythia-14m", "family": "fam"},  # never loaded: dry runs
    },
    "tasks": {"ioi": {"source": {"kind": "generate"}, "n": 8, "n_score": 4},
              "induction": {"n": 8, "n_score": 4, "prefix_len": [3, 5], "suffix_len": [6, 10]}},
    "curves": {"methods": ["ranked"], "threshold": 0.8, "max_steps": 2},
    # said here: the default config's ablations would merge in (config/config.yaml always loads)
    "ablation": {"kinds": ["zero"], "units": ["query"]},
}


def _planned(run, *args):
    out = smk("-n", "--configfile", "code.yaml", *args, cwd=run, env=smk_env(PYTHONPATH=str(run / "src"))).stdout
    return sorted((rule, tuple(sorted(wc.items()))) for rule, wc in planned_jobs(out))


def _build_finished(run):
    copy_workflow(run)
    shutil.copytree(ROOT / "src", run / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (run / "code.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    env = smk_env(PYTHONPATH=str(run / "src"))
    out = smk("-n", "--configfile", "code.yaml", cwd=run, env=env).stdout
    stand_in_outputs(run, out)
    # every job touched in DAG order, so every job has a record of its params (a plain --touch skips
    # the jobs already up to date by modification time, and their params could never change)
    smk("--touch", "--forceall", "--cores", "1", "--configfile", "code.yaml", cwd=run, env=env)
    assert _planned(run) == [], "the stand-in run is not up to date"


@pytest.fixture(scope="module")
def finished(built_once):
    """A scratch workflow with its own src/, whose every output and benchmark file exists and is up
    to date (stand-ins, then --touch): nothing is computed. Built once per session; each worker
    edits its own copy."""
    return built_once("codehash_finished", _build_finished)


def _rules_running(run, module):
    """The rules whose script's code includes `module` (circuitloc/...py)."""
    rules = {}
    for smk_file in (run / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=\s*rule[ \w]*:)", smk_file.read_text()):
            script = re.search(r'    script:\n\s+"\.\./workflow/scripts/([\w.]+)"', block)
            # `rule name:`, or a rule made in a loop: `rule:` with `name: groups.group_rule(config, "scores", _i)`
            # or `name: targets.task_rule(config, "figures", _ablations)` (one job per task), or
            # `name: groups.stage_rule(...)` (model_stages)
            name = re.match(r"\s*rule (\w+):", block) or re.search(r'name:\s+[\w.]*(?:group|task)_rule\([^"]*"(\w+)"', block)
            if script and not name and re.search(r"name:\s+groups\.stage_rule\(", block):
                rules["model_stages"] = script.group(1)
            elif script:
                rules[name.group(1)] = script.group(1)
        # `use rule a as b with:` runs a's script
        for parent, child in re.findall(r"^use rule (\w+) as (\w+)", smk_file.read_text(), flags=re.M):
            rules[child] = rules[parent]
    package = run / "src" / "circuitloc"
    return sorted(r for r, s in rules.items() if module in closure(run / "workflow" / "scripts" / s, package))


def _edit_function(text, name):
    """`text` with one statement added at the top of function `name`'s body (after its docstring)."""
    fn = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)
    first = fn.body[1] if ast.get_docstring(fn) and len(fn.body) > 1 else fn.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "_edited = None  # noqa: F841\n")
    return "".join(lines)


def _planned_after_edit(run, rel, edit):
    path = run / "src" / rel
    original = path.read_text()
    try:
        path.write_text(edit(original))
        return _planned(run)
    finally:
        path.write_text(original)


TOY_ENTRY = "circuitloc/models/toy/__init__.py"  # where train_toy, the toy trainer's entry, lives


def test_comment_edit_in_the_toy_trainer_plans_nothing(finished):
    planned = _planned_after_edit(finished, TOY_ENTRY,
                                  lambda t: t.replace("\ndef train_toy(", "\n# an edited comment\ndef train_toy(", 1))
    assert planned == []


def test_toy_trainer_edit_plans_the_toys_training_and_everything_downstream(finished):
    planned = _planned_after_edit(finished, TOY_ENTRY, lambda t: _edit_function(t, "train_toy"))
    assert _planned(finished) == []  # the edit undone: up to date again, no rerun recorded
    affected = _rules_running(finished, TOY_ENTRY)
    assert affected == ["model", "model_hf", "model_rebuilt"]  # only the model stage's script (its three rules) imports the toy trainer
    assert ("model", (("model", "tiny"),)) in planned
    downstream_of_tiny = _planned(finished, "--forcerun", "results/models/tiny/card.json")
    assert set(downstream_of_tiny) <= set(planned)
    # exactly the jobs of the rules whose code includes the toy trainer, and what follows them
    assert planned == _planned(finished, "--forcerun", *affected)


def test_plots_edit_plans_the_rules_whose_code_imports_plots(finished):
    """A figure change reruns the jobs that draw figures and what follows them, never a model,
    dataset, score or curve job."""
    text = (finished / "src" / "circuitloc" / "report" / "figures" / "plots.py").read_text()
    name = next(n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))
    planned = _planned_after_edit(finished, "circuitloc/report/figures/plots.py", lambda t: _edit_function(t, name))
    affected = _rules_running(finished, "circuitloc/report/figures/plots.py")
    assert {"figures", "figure_scale"} <= set(affected)
    assert {"figures", "figure_scale", "report"} <= {rule for rule, _ in planned}
    assert planned == _planned(finished, "--forcerun", *affected)
    assert not {stage_of(rule) for rule, _ in planned} & {"model", "dataset", "scores", "curves", "specificity"}


def test_cost_module_edit_plans_only_the_cost_table_and_report(finished):
    """A module only one script imports: only its rule and what follows it."""
    planned = _planned_after_edit(finished, "circuitloc/report/tables/cost.py", lambda t: _edit_function(t, "cost_table"))
    assert _rules_running(finished, "circuitloc/report/tables/cost.py") == ["cost"]
    assert {rule for rule, _ in planned} == {"cost", "report", "all"}
