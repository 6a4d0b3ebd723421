"""The code a workflow script runs, as one hash: the script and every circuitloc module it imports,
transitively.

The Snakefile passes ``code_hash(script)`` to each rule as a param; Snakemake reruns a job whose
params changed (the ``params`` rerun trigger, on by default), and with it everything downstream, so
a working tree never holds results of older code.

The import closure is found statically: every ``import`` / ``from ... import`` statement anywhere in
a module (function-local lazy imports included) and relative imports (``from . import x``,
``from .tasks import ioi``, ``from ..io import y``); importing ``a.b.c`` also runs the ``__init__`` of
``a`` and ``a.b``, so those are in it too. Modules next to the script that it imports
(``_src_path``) are followed as well. Third-party packages (torch, transformers) are not hashed:
their versions are the software environment's business. Imports built from strings at run time
(``importlib.import_module(name)``) are invisible to this walk.

Snakemake itself reruns a job whose script file is newer than its outputs (its ``code`` trigger looks
at the script's modification time, never at the modules it imports), so any edit of a workflow
script, a comment too, reruns its jobs whatever this hash says; the script is in the hash anyway,
for runs whose ``--rerun-triggers`` leave out ``code``.

What is hashed is each file's syntax tree with docstrings removed, not its text: editing a comment,
a docstring or the formatting (line breaks, spacing, quotes) keeps the hash, so it reruns no hours
of scoring; any change to the code itself (a name, a constant, a statement) changes it. Files are
named by their path inside the package, so moving the checkout changes nothing. The tree is
written out field by field with empty fields left out, so the hash does not change with the
Python version's ``ast.dump`` format. A file that does not parse is hashed by its bytes (the job
itself then reports the syntax error).

Parsing is cached per process (the Snakefile asks for many rules), and across processes in a file
beside this module's compiled code (``__pycache__/codehash.<python>.json``, as Python keeps its own
.pyc files there): each file's digest and imports keyed by the sha256 of its bytes, so an edited
file is parsed again and an unchanged one is not (about 0.4 s of CPU per Snakemake call, which
parses the whole package). A store that cannot be read or written is ignored.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from functools import cache
from pathlib import Path

from circuitloc.atomic import write_text
from circuitloc.errors import ArtifactError

PACKAGE = "circuitloc"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # the circuitloc this process imports
# {sha256 of a file's bytes: [digest, imports]} across processes, named by the Python version (its
# ast) and by FORMAT, which a change to `_canonical` or `_plain` must raise
FORMAT = 1
STORE = Path(__file__).resolve().with_name("__pycache__") / f"codehash.{sys.implementation.cache_tag}.v{FORMAT}.json"
_STORE_MAX = 4000  # entries kept: an old version of a file drops out once the store is full


_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _plain(node) -> tuple:
    """An import statement as plain data (what the store keeps): ("import", names) or
    ("from", level, module, names)."""
    names = tuple(a.name for a in node.names)
    return ("import", names) if isinstance(node, ast.Import) else ("from", node.level, node.module, names)


def _canonical(node, imports: list) -> str:
    """The tree without positions, docstrings or empty fields (stable across formatting and Python
    versions); its import statements are appended to `imports` on the way (one pass over the tree)."""
    if isinstance(node, ast.AST):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
        fields = []
        for f in node._fields:
            v = getattr(node, f, None)
            if f == "body" and isinstance(node, _SCOPES) and v and _is_docstring(v[0]):
                v = v[1:]
            if v is not None and v != []:
                fields.append(f"{f}={_canonical(v, imports)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join([_canonical(v, imports) for v in node]) + "]"
    return repr(node)


@cache
def _stored() -> dict:
    """The store's entries ({} when it is missing or unreadable); new ones are added in place."""
    try:
        entries = json.loads(STORE.read_text())
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        return {}


_unsaved: set[str] = set()  # keys parsed in this process and not yet in the store file


@cache
def _parse(path: Path) -> tuple[tuple, str]:
    """(the file's import statements as plain data (`_plain`), digest of its normalised source);
    no imports when it does not parse. From the store when these bytes were parsed before."""
    raw = path.read_bytes()
    key = hashlib.sha256(raw).hexdigest()
    hit = _stored().get(key)
    if isinstance(hit, list) and len(hit) == 2:
        return tuple(tuple(tuple(x) if isinstance(x, list) else x for x in i) for i in hit[1]), hit[0]
    try:
        tree = ast.parse(raw, filename=str(path))
    except (SyntaxError, ValueError):
        imports, digest = (), key
    else:
        nodes: list = []
        digest = hashlib.sha256(_canonical(tree, nodes).encode()).hexdigest()
        imports = tuple(_plain(n) for n in nodes)
    _stored()[key] = [digest, imports]
    _unsaved.add(key)
    return imports, digest


def _save() -> None:
    """Write the store when this process parsed files it lacked (atomically, by the project's own
    writer: a concurrent writer's entries may be lost, never mixed); the newest entries kept when it
    is full. Written with PYTHONDONTWRITEBYTECODE set too (it is no bytecode; a checkout's
    __pycache__ is git-ignored). A store that cannot be written (a read-only install) is skipped."""
    if not _unsaved:
        return
    keep = dict(list(_stored().items())[-_STORE_MAX:])
    try:
        write_text(json.dumps(keep, separators=(",", ":")), STORE)
    except (OSError, ArtifactError):  # parsed again next time
        return
    _unsaved.clear()


def _module_file(name: str, package_dir: Path) -> Path | None:
    """circuitloc.a.b -> <package_dir>/a/b.py or <package_dir>/a/b/__init__.py, if it exists."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    for f in (base / "__init__.py", base.with_suffix(".py") if len(parts) > 1 else None):
        if f is not None and f.is_file():
            return f
    return None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imported_names(source: str | Path | ast.AST, package: str | None) -> set[str]:
    """Absolute names of every module an import statement anywhere in `source` (a file or a tree)
    may load (submodule candidates of ``from X import name`` included), `package` being the
    importing module's package (None for a script, whose relative imports cannot resolve)."""
    if isinstance(source, ast.AST):
        nodes = [_plain(n) for n in ast.walk(source) if isinstance(n, (ast.Import, ast.ImportFrom))]
    else:
        nodes = _parse(Path(source))[0]
    names: set[str] = set()
    for node in nodes:
        if node[0] == "import":
            for name in node[1]:
                names.update(_with_parents(name))
            continue
        _, level, module, imported = node
        if level:
            if package is None:
                continue
            up = package.split(".")
            if level - 1 >= len(up):
                continue
            base = ".".join(up[: len(up) - (level - 1)])
            base = f"{base}.{module}" if module else base
        else:
            base = module
        names.update(_with_parents(base))
        names.update(f"{base}.{a}" for a in imported if a != "*")
    return names


def closure(script: str | Path, package_dir: Path | None = None) -> dict[str, Path]:
    """Every file the script's code comes from: {name: path}, the script itself as
    ``script:<file name>``, modules beside it as ``local:<name>``, package modules as
    ``circuitloc/...py`` (their path inside the package)."""
    package_dir = Path(package_dir or PACKAGE_DIR)
    script = Path(script).resolve()
    return dict(_closure(script, package_dir))


@cache
def _deps(path: Path, package: str | None, package_dir: Path) -> tuple[tuple[str, Path, str | None], ...]:
    """(name, file, its package) of every file `path` imports directly; `package` None: a script."""
    out = {}
    for name in imported_names(path, package):
        if name.split(".")[0] == PACKAGE:
            f = _module_file(name, package_dir)
            if f is not None:
                pkg = name if f.name == "__init__.py" else name.rpartition(".")[0]
                out[f] = (f"{PACKAGE}/{f.relative_to(package_dir).as_posix()}", f, pkg)
        elif package is None and "." not in name and (path.parent / f"{name}.py").is_file():
            f = path.parent / f"{name}.py"  # a helper beside the script (_src_path)
            out[f] = (f"local:{name}", f, None)
    return tuple(sorted(out.values()))


@cache
def _closure(script: Path, package_dir: Path) -> tuple[tuple[str, Path], ...]:
    found: dict[str, Path] = {f"script:{script.name}": script}
    todo: list[tuple[Path, str | None]] = [(script, None)]
    seen = {script}
    while todo:
        for key, f, pkg in _deps(*todo.pop(), package_dir):
            if f not in seen:
                seen.add(f)
                found[key] = f
                todo.append((f, pkg))
    return tuple(sorted(found.items()))


def code_hash(script: str | Path, package_dir: Path | None = None, length: int = 16) -> str:
    """The hash of the script's code: its normalised source and that of every module in its closure."""
    h = hashlib.sha256()
    for name, path in closure(script, package_dir).items():
        h.update(f"{name}\0{_parse(path)[1]}\n".encode())
    _save()
    return h.hexdigest()[:length]
