"""The vocabulary (circuitloc.plan: vocab, builtin_tasks, registry) is the one home of task and ablation names: no module outside
tasks/ decides by a task's or kind's name, the table and figure jobs never import torch, unknown
names are errors, and a task defined outside circuitloc registers (and runs through the workflow:
workflow/test_vocab_snakemake.py)."""

import ast
import re
import subprocess
import sys

import pytest
from workflow_helpers import ROOT, smk_env

from circuitloc.plan.vocabulary import builtin_tasks
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary import vocab

SRC = ROOT / "src" / "circuitloc"
PLUGINS = ROOT / "tests" / "plugins"
# where names may decide behaviour: the vocabulary itself (its types, the built-in tasks, the registry) and the
# task modules
VOCABULARY = (vocab, builtin_tasks, registry)
ALLOWED = {*(SRC.joinpath(*m.__name__.split(".")[1:]).with_suffix(".py") for m in VOCABULARY),
           *(SRC / "tasks").glob("*.py")}


def _plugins() -> list[str]:
    """The task and kind modules of the test suite (tests/plugins), registered like a config's."""
    if str(PLUGINS) not in sys.path:
        sys.path.insert(0, str(PLUGINS))
    return registry.load_task_modules(sorted(p.stem for p in PLUGINS.glob("*.py")))


def registered_names() -> tuple[set, set]:
    """(names, constants): every registered task's and kind's name and every task's metric names,
    read from the registries (a task or kind a test registers is among them); and the vocabulary's
    constants that hold a task's or kind's name (NEUTRAL, ZERO, MEAN, ...). The floor kinds are words
    of their own (FLOOR_ZERO is 'zero' too, a floor, not an ablation)."""
    registry.load_task_modules()
    tasks, kinds = set(registry._TASKS), set(registry.kinds())
    metrics = {m for t in tasks for m in registry.task(t).metrics}

    def holds_names(v):  # a name, or a tuple of names (a subset of the kinds: REPLACING_KINDS once)
        items = v if isinstance(v, (tuple, frozenset)) and v else (v,)
        return all(isinstance(i, str) and i in tasks | kinds for i in items)

    constants = {k for m in VOCABULARY for k, v in vars(m).items()
                 if k.isupper() and not k.startswith("FLOOR_") and holds_names(v)}
    return tasks | kinds | metrics, constants


def _deciding(tree, names: set, constants: set) -> list[tuple[int, str]]:
    """A task, kind or metric name deciding behaviour: a literal or a vocabulary constant holding one
    in a comparison (==, !=, in, not in), a match case or startswith/endswith; a dict literal keyed
    or valued by names that is looked up at once ({...}[x], {...}.get(x)); a name as .get's fallback.
    A module's own constant that holds names (`CAPPED_TASKS = ("facts",)`) counts as the vocabulary's do."""
    out = []
    for node in tree.body:  # the module's own tuples, lists and sets of names
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("frozenset", "set", "tuple") and value.args:
            value = value.args[0]
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)) and any(
                isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in names for e in value.elts):
            constants = constants | {t.id for t in targets if isinstance(t, ast.Name)}

    def found(node):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [n for e in node.elts for n in found(e)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return [node.value]
        ref = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return [ref] if ref in constants else []

    def guessing(node):  # {...}[x] or {...}.get(x, ...)
        if isinstance(node, ast.Dict):
            return [n for part in node.keys + node.values if part is not None for n in found(part)]
        return []

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            out += [(node.lineno, n) for side in [node.left, *node.comparators] for n in found(side)]
        elif isinstance(node, ast.MatchValue):
            out += [(node.lineno, n) for n in found(node.value)]
        elif isinstance(node, ast.Subscript):
            out += [(node.lineno, n) for n in guessing(node.value)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith"):
                out += [(node.lineno, n) for a in node.args for n in found(a)]
            elif node.func.attr == "get":
                out += [(node.lineno, n) for n in guessing(node.func.value)]
                out += [(node.lineno, n) for a in node.args[1:] for n in found(a)]
    return out


def decisions_by_name(names: set, constants: set) -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")) + sorted((ROOT / "workflow" / "scripts").glob("*.py")):
        if path not in ALLOWED:
            tree = ast.parse(path.read_text())
            found += [f"{path.relative_to(ROOT)}:{ln}: {n!r}" for ln, n in _deciding(tree, names, constants)]
    literal = "|".join(sorted(map(re.escape, names)))
    const = "|".join(sorted(constants))
    smk_pattern = re.compile(rf"""(==|!=|\bin\b|startswith\()\s*[(\[]?\s*(["']({literal})["']|((vocab|builtin_tasks|registry)\.)?\b({const})\b)""")
    for path in sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if smk_pattern.search(line.split("#")[0]):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    return found


def test_no_task_or_kind_name_decides_behaviour_outside_tasks_and_vocab():
    _plugins()
    found = decisions_by_name(*registered_names())
    assert not found, "names deciding behaviour outside tasks/ and the vocabulary:\n" + "\n".join(found)


def test_the_check_finds_a_decision_by_name():
    """The check above can fail: the branches it replaced are found, and so is a task or kind a
    test registers, with no list of names to update."""
    assert "recall" in _plugins() and "pooled" in registry.kinds()
    names, constants = registered_names()
    assert {"ioi", "facts_shared", "neutral", "zero", "resample", "recall", "pooled", "accuracy"} <= names
    assert {"NEUTRAL", "ZERO", "MEAN", "RESAMPLE"} <= constants and "FLOOR_ZERO" not in constants
    old = ('if task == "facts":\n    pass\nif kind != "zero":\n    pass\nx = name.startswith("facts")\n'
           'if target != NEUTRAL:\n    pass\nif t == builtin_tasks.NEUTRAL:\n    pass\n'
           'if "accuracy" in extras:\n    pass\n'
           'task = task or {"baseline_ld": "ioi"}.get(col, "facts")\n'
           'if a in ("recall", "pooled"):\n    pass\nmatch k:\n    case "mean":\n        pass\n'
           'if kind == FLOOR_ZERO or spec.floor(m) == vocab.FLOOR_ZERO:\n    pass\n'
           'if kind in vocab.SOME_KINDS:\n    pass\n'
           'CAPPED_TASKS = ("facts",)\nif task in CAPPED_TASKS:\n    pass\n')
    got = sorted(_deciding(ast.parse(old), names, constants | {"SOME_KINDS"}))
    assert got == [(1, "facts"), (3, "zero"), (5, "facts"), (6, "NEUTRAL"), (8, "NEUTRAL"), (10, "accuracy"),
                   (12, "facts"), (12, "ioi"), (13, "pooled"), (13, "recall"), (16, "mean"), (20, "SOME_KINDS"),
                   (23, "CAPPED_TASKS")], got


# the modules of the table, figure and analysis jobs, and the scripts that run them (no threads)
LIGHT_MODULES = ("plan.vocabulary.vocab", "plan.vocabulary.builtin_tasks", "plan.vocabulary.catalog",
                 "report.tables.localization", "report.tables.writers", "report.figures.draw", "report.tables.analysis",
                 "report.sweep.summary", "report.figures.plots", "report.tables.cost", "runner", "io",
                 "plan.jobs.resources", "metrics", "stats")
LIGHT_SCRIPTS = ("tables", "figures", "fig_scale", "robustness", "specificity_table", "stability", "sweep_tables",
                 "sweep_overview")


def _script_imports(name):
    tree = ast.parse((ROOT / "workflow" / "scripts" / f"{name}.py").read_text())
    return sorted({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                   and n.module.startswith("circuitloc")})


def test_table_and_figure_jobs_do_not_import_torch():
    """Each light module, and everything a light script imports, in a fresh interpreter: torch (and
    transformers) stay out of sys.modules, so these jobs start in a fraction of a second."""
    modules = [f"circuitloc.{m}" for m in LIGHT_MODULES] + [m for s in LIGHT_SCRIPTS for m in _script_imports(s)]
    code = ("import sys, importlib\n"
            f"for m in {sorted(set(modules))!r}: importlib.import_module(m)\n"
            "from circuitloc.runner import setup; setup()\n"
            "from circuitloc.report.figures import draw as figures\n"
            "from circuitloc.report.tables import writers\n"
            "writers.write_sweep, writers.write_stability, writers.write_robustness, figures.fig_scale\n"
            "from circuitloc.report.tables import analysis\n"
            "from circuitloc.report.sweep import summary\n"
            "print(sorted(k for k in ('torch', 'transformers', 'transformer_lens') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=smk_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_unknown_names_are_errors_never_fallbacks():
    with pytest.raises(ValueError, match="unknown ablation 'median-query'"):
        registry.parse_ablation("median-query")
    with pytest.raises(ValueError, match="unknown ablation 'zero-block'"):
        registry.parse_ablation("zero-block")
    with pytest.raises(ValueError, match="unknown task 'iio'"):
        registry.task("iio")
    with pytest.raises(ValueError, match="tasks.facts_shared"):
        registry.workflow_tasks(["ioi", "facts_shared"])
    with pytest.raises(ValueError, match="unknown ablation kind 'median'"):
        registry.kind("median")


def test_unit_labels_round_trip():
    for unit in vocab.UNITS:
        label = vocab.unit_label(unit, 3, 1)
        assert vocab.unit_kind(label) == unit
    assert [vocab.unit_label(u, 0, 2) for u in vocab.UNITS] == ["L0H2", "L0G2", "L0"]


def test_a_task_module_registers_its_spec(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "plugins"))
    assert registry.load_task_modules(["synthetic_task"]) == ["recall"]
    assert registry.task("recall").metrics == ("recall_ld",)
    from circuitloc.tasks.registry import task_of

    t = task_of("recall")
    assert t.metric_name == "recall_ld" and t.higher_is_better and t.fields == ("next_id", "prev_id")
    with pytest.raises(ValueError, match="already defined"):
        registry.register(vocab.TaskSpec("recall", "elsewhere", ("x",), True, ()))


def test_capping_is_a_field_of_the_task_spec():
    """Whether the sweep's tests cap a task's damage at 100% is its spec's `capped` (facts, and its
    family-shared condition, which has its metric), never a list of task names."""
    from circuitloc import metrics

    assert {t for t in registry._TASKS if registry.task(t).capped} == {"facts", "facts_shared"}
    assert metrics.capped_pct(203.0, registry.task("facts").capped) == 100.0
    assert metrics.capped_pct(203.0, registry.task("ioi").capped) == 203.0
    assert not hasattr(metrics, "CAPPED_TASKS")
