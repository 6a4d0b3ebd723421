"""The curve threshold (heads-to-threshold, 80% damage in the paper) has one default in the code,
`metrics.DEFAULT_THRESHOLD`, equal to the default config's `curves.threshold`; every other function
that needs it is passed the run's value, so a rule that forgets to pass it fails instead of silently
using 0.8, and no module reads a heads-to column by a hard-coded name."""

import ast
import re

import yaml
from workflow_helpers import ROOT

from circuitloc import metrics

SRC = ROOT / "src" / "circuitloc"
HEADS_TO_COLUMN = re.compile(r"\bheads_to_\d+")


def _docstrings(tree) -> set:
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, scopes) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def _number(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def threshold_defaults(source: str) -> list[tuple[int, str]]:
    """(line, what) of every place a module writes a threshold down: a `threshold` parameter or field
    with a number as its default, `.get("threshold", <number>)`, a `*THRESHOLD*` name set to a
    number, and a string (not a docstring) naming a heads-to column by its percentage."""
    tree, out = ast.parse(source), []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            out += [(node.lineno, f"parameter {arg.arg}={d.value}") for arg, d in pairs
                    if d is not None and "threshold" in arg.arg.lower() and _number(d)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if "threshold" in node.target.id.lower() and _number(node.value):
                out.append((node.lineno, f"field {node.target.id} = {node.value.value}"))
        elif isinstance(node, ast.Assign) and _number(node.value):
            out += [(node.lineno, f"{t.id} = {node.value.value}") for t in node.targets
                    if isinstance(t, ast.Name) and "THRESHOLD" in t.id.upper()]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value == "threshold" \
                    and _number(node.args[1]):
                out.append((node.lineno, f'.get("threshold", {node.args[1].value})'))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if HEADS_TO_COLUMN.search(node.value):
                out.append((node.lineno, f"column name {node.value!r}"))
    return out


def test_the_default_threshold_is_written_in_one_place():
    found = [f"{p.relative_to(ROOT)}:{ln}: {what}" for p in sorted(SRC.rglob("*.py"))
             for ln, what in threshold_defaults(p.read_text())]
    assert found == [f"src/circuitloc/metrics.py:{_line_of('DEFAULT_THRESHOLD = ')}: DEFAULT_THRESHOLD = 0.8"], \
        "a second default threshold (pass the run's config curves.threshold instead):\n" + "\n".join(found)


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate((SRC / "metrics.py").read_text().splitlines(), 1) if line.startswith(text))


def test_the_check_finds_each_way_of_writing_a_second_default():
    planted = ('def f(curve, threshold: float = 0.8):\n    pass\n'
               'def g(x, *, heads_threshold=0.9):\n    pass\n'
               'class Job:\n    threshold: float = 0.8\n'
               't = params.get("threshold", 0.8)\n'
               'CURVE_THRESHOLD = 0.8\n'
               'v = row.get("heads_to_80_greedy")\n'
               'def h(threshold):\n    """reads heads_to_80 (a docstring may say so)"""\n')
    assert sorted(ln for ln, _ in threshold_defaults(planted)) == [1, 3, 6, 7, 8, 9]


def test_the_default_is_the_default_configs_threshold():
    """config/config.yaml is the run's default (the schema requires curves.threshold and gives it no
    default of its own); the code's constant agrees with it."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert config["curves"]["threshold"] == metrics.DEFAULT_THRESHOLD
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    for block in (schema["properties"]["curves"], schema["$defs"]["curves"]):  # the run's block, a model's
        declared = block.get("properties", {}).get("threshold", {})
        assert declared.get("default", metrics.DEFAULT_THRESHOLD) == metrics.DEFAULT_THRESHOLD
