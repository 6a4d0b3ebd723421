"""The package's wings by when code runs, read from the imports themselves, in one order that no
import runs back up (WINGS: what each wing may import, checked for every ordered pair of wings):

- the ground floor, every module at the package's top level (metrics, stats, units, prompts, io,
  modelcard, atomic, errors, runner, resume, sufficiency), imports no wing;
- plan/ runs while Snakemake parses the workflow: the standard library, yaml and jsonschema (the
  config schema's validation needs it) and nothing else, at module level or inside a function, and
  no other wing (only the ground floor's standard-library modules);
- tasks/ (prompts and datasets of each task) may import plan/;
- models/ (cards, weights, loading a model and its tokenizer) may import plan/ and tasks/ (a toy
  trains on the tasks' data), never engine/ (the engine's choice and construction are engine/select);
- engine/ (scan, ablation, curves) may import plan/, tasks/ and models/;
- report/ runs inside table and figure jobs: plan/ only, and never torch, transformers or
  transformer_lens, not even inside a function;
- api/ (the Python API) may import every wing; the package's __init__ imports it by name, lazily;
- no import circle; function-local imports only of the heavy optional dependencies the module's wing
  allows (LAZY, less the wing's exclusions in LAZY_NOT).

Each rule is checked transitively (a plan module that imports a ground-floor module that imports
numpy breaks the rule too), and the checker is shown to fail on planted violations."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import shutil
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "circuitloc"
# Imported inside a function, on purpose: optional or heavy at the point of use (a table job never
# loads matplotlib unless it draws; a dataset job loads the hub client only to download).
LAZY = {"torch", "transformers", "transformer_lens", "huggingface_hub", "tokenizers", "matplotlib", "seaborn",
        "scipy", "gguf", "safetensors"}
# a wing's exclusions from LAZY: the plan imports none of them, a table or figure job no model stack
LAZY_NOT = {"plan": set(LAZY), "report": {"torch", "transformers", "transformer_lens"}}
# the only third-party modules the plan may import (yaml reads the config, jsonschema validates it)
PLAN_ALLOWED = {"yaml", "jsonschema"}
# The one order of the wings: what each may import (besides itself). Every ordered pair of wings not
# listed here is an arrow back up (or across), and the checker names it.
WINGS = {"ground": set(), "plan": {"ground"}, "tasks": {"ground", "plan"}, "models": {"ground", "plan", "tasks"},
         "engine": {"ground", "plan", "tasks", "models"}, "report": {"ground", "plan"},
         "api": {"ground", "plan", "tasks", "models", "engine", "report"}}
# api/ (the Python API, docs/api.md) sits on top of every wing; the package's __init__ imports it by
# name on first attribute access (circuitloc.Run), so `import circuitloc` stays light
LIMIT_LINES = 300


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for p in sorted(src.rglob("*.py")):
        parts = list(p.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path) -> tuple[tuple[str, bool, int], ...]:
    """(absolute module name, imported at module level?, line) of every import in the file."""
    return _imports_of(name, path.name == "__init__.py", path.read_text())


@functools.lru_cache(maxsize=None)
def _imports_of(name: str, is_package: bool, source: str) -> tuple[tuple[str, bool, int], ...]:
    """`_imports` of a module's source, parsed once per source text (the planted checks below copy
    the package and change one file: the other files are not parsed again)."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    top = {id(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    # a module-level `if TYPE_CHECKING:` or try/except import still runs at import time
    for n in tree.body:
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(m) for m in ast.walk(n) if isinstance(m, (ast.Import, ast.ImportFrom))}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")
                base = ".".join(up[: len(up) - (node.level - 1)])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.append((mod, id(node) in top, node.lineno))
            # `from circuitloc.report import sweep` imports the submodule sweep
            out += [(f"{mod}.{a.name}", id(node) in top, node.lineno) for a in node.names]
    return tuple(out)


def _wing(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "ground"
    if parts[1] in ("plan", "engine", "report", "tasks", "models", "api"):
        return parts[1]
    return "ground"


def _third_party(root: str) -> bool:
    return root not in sys.stdlib_module_names and root not in ("__future__", "circuitloc")


def violations(src: Path = SRC) -> list[str]:
    """Every broken rule of the module docstring, one line each."""
    mods = _modules(src)
    graph: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    found = []
    for name, path in mods.items():
        graph[name], external[name] = set(), set()
        where, wing = path.relative_to(src.parent), _wing(name)
        for mod, at_top, line in _imports(name, path):
            root = mod.split(".")[0]
            if root == "circuitloc":
                target = mod if mod in mods else mod.rpartition(".")[0]
                if target in mods and target != name:
                    graph[name].add(target)
                    if not at_top:
                        found.append(f"{where}:{line}: function-local import of {target} "
                                     "(only heavy optional dependencies are imported lazily)")
            elif root and root != "__future__":
                if at_top:
                    external[name].add(root)
                elif root not in LAZY - LAZY_NOT.get(wing, set()):
                    found.append(f"{where}:{line}: function-local import of {root} (the {wing} wing's lazy "
                                 f"dependencies are {sorted(LAZY - LAZY_NOT.get(wing, set()))})")
                if wing == "plan" and _third_party(root) and root not in PLAN_ALLOWED:
                    found.append(f"{where}:{line}: the plan imports {root} (standard library, yaml and jsonschema only)")

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for name in mods:
        wing, closure = _wing(name), reach(name)
        wings = {_wing(m) for m in closure}
        outside = set().union(*(external[m] for m in closure | {name}))
        for other in sorted(wings - WINGS[wing] - {wing}):
            bad = sorted(m for m in closure if _wing(m) == other)
            who = "the ground floor" if wing == "ground" else f"the {wing} wing"
            found.append(f"{name}: {who} imports the {other} wing {bad} (allowed: {sorted(WINGS[wing])})")
        if wing == "plan":
            third = {r for r in outside if _third_party(r)} - PLAN_ALLOWED
            if third:
                found.append(f"{name}: the plan imports {sorted(third)} (standard library, yaml and jsonschema only)")
        if wing == "report" and LAZY_NOT["report"] & outside:
            found.append(f"{name}: a table or figure job imports {sorted(LAZY_NOT['report'] & outside)}")
        if name in closure:
            found.append(f"{name}: import circle ({name} imports itself through {sorted(closure & set(graph))[:6]})")
    return list(dict.fromkeys(found))


def test_the_wings_keep_their_imports():
    assert violations() == []


def test_no_module_is_a_house_of_its_own():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > LIMIT_LINES}
    assert not long, f"modules over {LIMIT_LINES} lines: {long}"


@pytest.mark.parametrize("rel, code, expect", [
    ("plan/planted.py", "import numpy\n", "the plan imports ['numpy']"),
    ("plan/planted.py", "from circuitloc.engine import scan\n", "'circuitloc.engine.scan'"),
    ("plan/planted.py", "from circuitloc import metrics\n", "the plan imports ['numpy', 'polars']"),
    ("plan/planted.py", "def f():\n    import torch\n", "function-local import of torch"),
    ("plan/planted.py", "def f():\n    import matplotlib.pyplot\n", "function-local import of matplotlib"),
    ("plan/planted.py", "def f():\n    import huggingface_hub\n", "the plan imports huggingface_hub"),
    ("plan/planted.py", "import requests\n", "the plan imports ['requests']"),
    ("plan/planted.py", "import tomli_w\n", "the plan imports ['tomli_w']"),
    ("engine/planted.py", "from circuitloc.report.tables import localization\n", "the engine wing imports"),
    ("tasks/planted.py", "from circuitloc.report.tables import writers\n", "the tasks wing imports"),
    ("models/planted.py", "from circuitloc.report.tables import writers\n", "the models wing imports"),
    ("report/planted.py", "from circuitloc.engine import scan\n", "a table or figure job imports ['torch'"),
    ("report/planted.py", "def f():\n    import torch\n", "function-local import of torch"),
    ("report/planted.py", "def f():\n    from transformers import AutoModel\n", "function-local import of transformers"),
    ("report/planted.py", "def f():\n    import transformer_lens\n", "function-local import of transformer_lens"),
    ("metrics_planted.py", "from circuitloc.plan.vocabulary import vocab\n", "the ground floor imports"),
    ("prompts.py", "import torch\nfrom circuitloc.report.tables import writers\n", "circuitloc.prompts: the ground floor imports"),
    ("report/planted.py", "def f():\n    import polars\n", "function-local import of polars"),
    ("report/planted.py", "def f():\n    from circuitloc import io\n", "function-local import of circuitloc.io"),
    ("report/planted.py", "from circuitloc.report import planted2\n", "import circle"),
    # every arrow back up, or across, between the wings (WINGS)
    ("models/planted.py", "from circuitloc.engine import scan\n", "the models wing imports the engine wing"),
    ("models/load.py", "from circuitloc.engine.select import scanner_for\n", "the models wing imports the engine wing"),
    ("tasks/planted.py", "from circuitloc.engine import job\n", "the tasks wing imports the engine wing"),
    ("tasks/planted.py", "from circuitloc.models import card\n", "the tasks wing imports the models wing"),
    ("report/planted.py", "from circuitloc.tasks import common\n", "the report wing imports the tasks wing"),
    ("report/planted.py", "from circuitloc.models import card\n", "the report wing imports the models wing"),
    ("plan/planted.py", "from circuitloc.report.figures import style\n", "the plan wing imports the report wing"),
    ("plan/planted.py", "from circuitloc.tasks import registry\n", "the plan wing imports the tasks wing"),
    ("modelcard.py", "from circuitloc.plan.config import hub\n", "the ground floor imports the plan wing"),
])
def test_the_checker_finds_a_planted_violation(tmp_path, rel, code, expect):
    copy = tmp_path / "circuitloc"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / rel).write_text(code)
    if "planted2" in code:  # a circle of two
        (copy / "report" / "planted2.py").write_text("from circuitloc.report import planted\n")
    found = violations(copy)
    assert any(expect in v for v in found), found


def _ours(name: str) -> bool:
    return name == "circuitloc" or name.startswith("circuitloc.")


@contextlib.contextmanager
def _compile_once():
    """Each source compiled once while it lasts: the check below imports every module again for each
    module (about 2000 imports), and without .pyc files (PYTHONDONTWRITEBYTECODE) most of its time
    was compiling the same sources again. Code is reused only for identical bytes of one path."""
    code, compile_ = {}, SourceFileLoader.source_to_code

    def once(self, data, path, *, _optimize=-1):
        if (path, data) not in code:
            code[path, data] = compile_(self, data, path, _optimize=_optimize)
        return code[path, data]

    SourceFileLoader.source_to_code = once
    try:
        yield
    finally:
        SourceFileLoader.source_to_code = compile_


def test_every_module_imports_on_its_own():
    """Each module imported first, in a clean circuitloc namespace: a circle hidden from the import
    statements (a registry that imports task modules by name) fails here. In this process (the
    third-party packages it has loaded stay; no interpreter is started), every circuitloc module
    removed from sys.modules before each import, and the test's own modules put back after."""
    saved = {k: m for k, m in sys.modules.items() if _ours(k)}
    bad = []
    try:
        with _compile_once():
            for n in sorted(_modules(SRC)):
                for k in [k for k in sys.modules if _ours(k)]:
                    del sys.modules[k]
                try:
                    importlib.import_module(n)
                except Exception as e:
                    bad.append(f"{n}: {type(e).__name__}: {e}")
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    assert not bad, "modules that fail when imported first:\n" + "\n".join(bad)
