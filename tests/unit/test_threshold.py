"""The curve threshold (heads-to-threshold, 80% damage in the paper) has one default in the code,
`metrics.DEFAULT_THRESHOLD`, equal to the default config's `curves.threshold`; every other function
that needs it is passed the run's value, so a rule that forgets to pass it fails instead of silently
using 0.8, and no module reads a heads-to column by a hard-coded name."""

import ast
import dataclasses
import functools
import re

import yaml
from workflow_helpers import ROOT

from circuitloc import metrics

SRC = ROOT / "src" / "circuitloc"
HEADS_TO_COLUMN = re.compile(r"\bheads_to_\d+")


@functools.lru_cache(maxsize=None)
def _defaults(node) -> list:
    """(argument, default expression) of a function's parameters that have a default."""
    a = node.args
    pos = a.posonlyargs + a.args
    return list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))


def _tree(source: str) -> ast.Module:
    """A module's tree, parsed once per source text (three checks below read every module)."""
    return ast.parse(source)


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
    tree, out = _tree(source), []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out += [(node.lineno, f"parameter {arg.arg}={d.value}") for arg, d in _defaults(node)
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


# ---- every default once: the curve and score keys (issue 63) ---------------------------------------
# The curve keys the schema gives a default (config/schema.yaml, the run-wide `curves:` block): the
# curve job requires them, no code writes them again.
SCHEMA_CURVE_KEYS = ("greedy_candidates", "greedy_steps", "control_draws", "prompts")
# The curve keys whose one default is plan.config.views.CURVE_DEFAULTS (the schema gives them none, so that
# a run's job params are what they were; engine.settings.CurveSettings reads it), and the names the
# plans built from the settings give them (engine.settings.Greedy, RankedPlan).
CODE_CURVE_KEYS = {"greedy_stop_damage": ("stop_damage",), "greedy_guided": ("guided",), "greedy_audit": ("audit",),
                   "greedy_attribution": ("attribution",), "ig_steps": (), "greedy_screen": ("screen",),
                   "greedy_recheck": ("recheck",), "ranked_stop_damage": ("stop_damage",),
                   "ranked_stop_patience": ("stop_patience", "patience"), "sufficiency": ()}
SCORE_KEYS = ("method", "audit", "level", "top")
# where scores.* are read (their names are too common to look for everywhere: a `method` of an interval)
SCORE_MODULES = ("engine/settings.py", "engine/guided_scan.py", "plan/config/views.py", "plan/config/checks.py")


def key_defaults(source: str, names, aliases=()) -> list[tuple[int, str]]:
    """(line, what) of every value (not None: None means not given) a module writes down as the
    default of a key in `names`: a parameter or field default (of that name or one of `aliases`),
    `.get("key", value)`, `.get("key") or value`, and a dict entry `"key": value` (a literal, never a
    name that refers to the one place)."""
    tree, out, names = _tree(source), [], set(names)
    fields = names | set(aliases)

    def literal(node) -> bool:
        return isinstance(node, ast.Constant) and node.value is not None and not isinstance(node.value, str) \
            or isinstance(node, ast.Constant) and isinstance(node.value, str)

    def got(node):  # the key of x.get("key"), else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in names:
            return node.args[0].value
        return None

    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out += [(node.lineno, f"parameter {arg.arg}={d.value!r}") for arg, d in _defaults(node)
                    if d is not None and arg.arg in fields and literal(d)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if node.target.id in fields and literal(node.value):
                out.append((node.lineno, f"field {node.target.id} = {node.value.value!r}"))
        elif got(node) and len(node.args) == 2 and literal(node.args[1]):
            out.append((node.lineno, f'.get("{got(node)}", {node.args[1].value!r})'))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and got(node.values[0]) \
                and any(literal(v) for v in node.values[1:]):
            out.append((node.lineno, f'.get("{got(node.values[0])}") or a value'))
        elif isinstance(node, ast.Dict):
            out += [(node.lineno, f'"{k.value}": {v.value!r}') for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value in names and literal(v) and id(k) not in docs]
    return out


def _found(paths, names, aliases=()) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{ln}: {what}" for p in paths
            for ln, what in key_defaults(p.read_text(), names, aliases)]


def _schema_defaults(node, path="") -> dict:
    """{dotted path of a property: its `default:`} over the whole schema."""
    out = {}
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, dict) and "default" in v and path.endswith("properties"):
                out[f"{path}.{k}"] = v["default"]
            out.update(_schema_defaults(v, f"{path}.{k}" if path else k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.update(_schema_defaults(v, f"{path}[{i}]"))
    return out


def test_every_curve_and_score_default_is_written_once():
    from circuitloc.engine.settings import CurveSettings
    from circuitloc.plan.config.views import CURVE_DEFAULTS, SCORE_DEFAULTS

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    declared = _schema_defaults(schema)
    code = {f.name: f.default for f in dataclasses.fields(CurveSettings)}
    assert set(CURVE_DEFAULTS) == set(CODE_CURVE_KEYS) and {k: code[k] for k in CURVE_DEFAULTS} == CURVE_DEFAULTS
    # the schema's curve keys: one `default:`, in the run-wide block, and none in the code
    for key in SCHEMA_CURVE_KEYS:
        assert [p for p in declared if p.endswith(f".{key}") and ".curves." in p] == [f"properties.curves.properties.{key}"], key
    assert _found(sorted(SRC.rglob("*.py")), SCHEMA_CURVE_KEYS) == []
    # the other curve keys: plan.config.views.CURVE_DEFAULTS alone, no `default:` in the schema
    assert not [p for p in declared if p.rpartition(".")[2] in CODE_CURVE_KEYS and ".curves." in p]
    aliases = {a for alias in CODE_CURVE_KEYS.values() for a in alias}
    line = _line_in("plan/config/views.py", "CURVE_DEFAULTS = ")
    want = [f"src/circuitloc/plan/config/views.py:{line}: \"{k}\": {v!r}" for k, v in CURVE_DEFAULTS.items() if v is not None]
    assert _found(sorted(SRC.rglob("*.py")), CODE_CURVE_KEYS, aliases) == want, "a second default of a curve key"
    # scores.*: plan.config.views.SCORE_DEFAULTS (and MIN_TOP) alone, none in the schema
    assert not [p for p in declared if ".scores." in p and p.rpartition(".")[2] in SCORE_KEYS]
    found = _found([SRC / m for m in SCORE_MODULES], SCORE_KEYS)
    assert found == [f"src/circuitloc/plan/config/views.py:{_line_in('plan/config/views.py', 'SCORE_DEFAULTS = ')}: \"{k}\": {v!r}"
                     for k, v in SCORE_DEFAULTS.items()], "a second default of a scores key"
    # config/config.yaml sets some of these keys: the default run's values (greedy_stop_damage 1.0), kept
    # there so that its jobs' params stay what they were; its commented scores block says the defaults
    config = (ROOT / "config" / "config.yaml").read_text()
    commented = re.search(r"^# scores: (\{.*\})$", config, re.MULTILINE)
    assert commented is None or yaml.safe_load(commented.group(1)) == SCORE_DEFAULTS


def _line_in(rel: str, text: str) -> int:
    return next(i for i, line in enumerate((SRC / rel).read_text().splitlines(), 1) if line.startswith(text))


def test_the_schemas_words_say_the_one_default():
    """A description that says "(default X)" of a curve or score key says the value the key takes."""
    from circuitloc.engine.settings import CurveSettings
    from circuitloc.plan.config.views import SCORE_DEFAULTS

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    code = {f.name: f.default for f in dataclasses.fields(CurveSettings)}
    code.update({k: v["default"] for k, v in schema["properties"]["curves"]["properties"].items() if "default" in v})
    blocks = {"curves": (schema["$defs"]["curves"]["properties"], code),
              "scores": (schema["$defs"]["scores"]["properties"], SCORE_DEFAULTS)}
    said = 0
    for name, (props, values) in blocks.items():
        for key, prop in props.items():
            m = re.search(r"\(default ([^\s;),]+)", prop.get("description", ""))
            if m and key in values:
                said += 1
                assert yaml.safe_load(m.group(1)) == values[key], (name, key, m.group(0), values[key])
    assert said >= 5  # the check reads the descriptions it means to


def test_the_default_dtype_is_written_once():
    """"float32" in the code: the dtype tables' keys and plan.jobs.resources.DEFAULT_DTYPE, nothing else."""
    found = []
    for p in sorted(SRC.rglob("*.py")):
        tree = _tree(p.read_text())
        keys = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
        found += [f"{p.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value == "float32" and id(n) not in keys]
    assert found == [f"src/circuitloc/plan/jobs/resources.py:{_line_in('plan/jobs/resources.py', 'DEFAULT_DTYPE = ')}"], found


def test_the_key_check_finds_each_way_of_writing_a_second_default():
    planted = ('def f(x, ig_steps=4):\n    pass\n'
               'class Plan:\n    audit: float = 0.0\n'
               't = cfg.get("ig_steps", 4)\n'
               'u = cfg.get("greedy_attribution") or "linear"\n'
               'D = {"sufficiency": True}\n'
               'class Fine:\n    guided: int | None = None\n    audit: float = ONE_PLACE["audit"]\n'
               'v = cfg.get("ig_steps")\n')
    names = {"ig_steps", "greedy_attribution", "sufficiency"}
    assert sorted(ln for ln, _ in key_defaults(planted, names, {"audit", "guided"})) == [1, 4, 5, 6, 7]
