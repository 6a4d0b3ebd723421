"""No function in src/ takes more than six parameters: a job's settings travel as one record
(`engine.settings.JobSettings`, `report.records.TableJob`, `ablation.Probe`, ...), built once, not
as a bundle of keywords passed through several calls, where one more setting means one more
parameter on every function along the way. Keyword-only parameters count, and so do *args and
**kwargs (one each: a bundle is still a bundle); self and cls do not."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
LIMIT = 6


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return names[1:] if names and names[0] in ("self", "cls") else names


def too_many(source: str, where: str = "<string>", limit: int = LIMIT) -> list[str]:
    """'where:line name (n): params' for every function (methods and nested ones too) over `limit`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = parameters(node)
            if len(names) > limit:
                out.append(f"{where}:{node.lineno} {node.name} ({len(names)}): {', '.join(names)}")
    return out


def test_no_function_in_src_takes_more_than_six_parameters():
    found = [f for p in sorted(SRC.rglob("*.py")) for f in too_many(p.read_text(), str(p.relative_to(SRC.parent)))]
    assert not found, f"functions with more than {LIMIT} parameters (pass a record instead):\n" + "\n".join(found)


def test_the_count_sees_every_kind_of_parameter():
    """The check can fail: keyword-only parameters, *args and **kwargs count, self does not, and a
    method or a nested function is found like any other."""
    code = ("def ok(a, b, c, d, e, f):\n    pass\n"
            "def kw(a, b, c, *, d, e, f, g):\n    pass\n"
            "def bundle(a, b, c, d, e, *args, **kwargs):\n    pass\n"
            "class C:\n    def method(self, a, b, c, d, e, f):\n        pass\n"
            "    def wide(self, a, b, c, d, e, f, g):\n        def inner(a, b, c, d, e, f, g, h, /):\n            pass\n")
    got = too_many(code)
    assert [g.split()[1] for g in got] == ["kw", "bundle", "wide", "inner"], got
    assert "bundle (7): a, b, c, d, e, *args, **kwargs" in got[1]
