"""The run's configuration, before Snakemake's schema validation: the embedded default
(config/config.yaml), then every `--configfile` in order, then `--config k=v`, merged recursively.

Why here and not in the Snakefile: Snakemake merges `--configfile` and `--config` onto the Snakefile's
`configfile:` only when the two never overlap in the way this workflow needs (a config that brings its own
`models:` must replace the default's models, never add to them), and loads the default not at all when
`--configfile` is given. Standard library and yaml only: the Snakefile imports it at DAG-build time.
"""

from __future__ import annotations

import copy
import difflib
import functools
import sys
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators

from circuitloc.errors import ConfigError

# A layer that names one of these replaces the value below it instead of merging into it: two
# configs' models are never mixed (the default's three models must not ride along with the paper's).
REPLACED = ("models",)


def merge(base: dict, overlay: dict) -> dict:
    """`overlay` on top of `base`, recursively for mappings; any other value (a list, a number)
    replaces. Neither argument is changed."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int):
        super().__init__(f"key {key!r} appears twice in one mapping (again on line {line})")
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps
    the last silently, so a block pasted twice would override the first without a word. Keys a
    `<<: *anchor` merge brings in may be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_layer(path) -> dict:
    """One config file as a mapping (YAML or JSON), or an error that names the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = copy.deepcopy(_parsed(path.read_text()))
    except DuplicateKey as e:
        raise ConfigError(f"config file {path}: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(yaml_error_line(path, e)) from e
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data or {}


def yaml_error_line(path, e: yaml.YAMLError) -> str:
    """One line for a YAML file that does not parse: the file, the line and column where the parser stopped,
    what it found (PyYAML's own message spans several lines, with a copy of the text)."""
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return f"config file {path}: not valid YAML: {' '.join(str(e).split())}"
    problem = getattr(e, "problem", None) or "not valid YAML"
    context, where = getattr(e, "context", None), getattr(e, "context_mark", None)
    after = f" ({context} from line {where.line + 1})" if context and where is not None else ""
    hint = "; check the indentation (spaces only, children deeper than their parent)" \
        if any(w in problem for w in ("block end", "mapping values", "'\\t'")) else ""
    return f"config file {path}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}{after}{hint}"


@functools.lru_cache(maxsize=64)
def _parsed(text: str, loader=_UniqueKeyLoader):
    """A YAML text as `loader` reads it, parsed once per text (a plan, and the tests, read the same
    config files and the schema many times; callers take a deep copy to change)."""
    return yaml.load(text, Loader=loader)  # noqa: S506  (a safe loader)


def cli_values(value):
    """`--config k=v` values as YAML would read them. Snakemake turns `1` and `True` into numbers
    and booleans but leaves `false`, `yes` and every value nested in `{...}` or `[...]` a string
    (`group_ablations=false` would be the string 'false', which the schema refuses); a string that
    YAML reads as a boolean or number becomes one, any other string stays as given."""
    if isinstance(value, dict):
        return {k: cli_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cli_values(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(parsed, (bool, int, float)):
            return parsed
    return value


def overlay(cfg: dict, layer: dict) -> dict:
    """One layer on top of `cfg` (see `effective_config`)."""
    for key in REPLACED:
        if key in layer:
            cfg = {**cfg, key: {}}
    if "sweep" in layer and "models" not in layer:  # a sweep config brings its toys: none of the default's
        cfg = {**cfg, "models": {}}
    if runs_own_tasks(layer) and isinstance(cfg.get("tasks"), dict):
        cfg = {**cfg, "tasks": {t: block for t, block in cfg["tasks"].items() if t in layer["tasks"]}}
    return merge(cfg, layer)


def runs_own_tasks(layer: dict) -> bool:
    """A run config (a layer with its own `models:` or `sweep:`) whose `tasks:` gives a task's block
    runs the tasks it names only: the tasks below that it does not name are left out, while each it
    names still merges onto the settings below. An overlay without models
    (config/facts_accuracy.yaml), or one whose `tasks:` only removes tasks (`<task>: null`), adjusts
    the tasks it names and keeps the others."""
    tasks = layer.get("tasks")
    return ("models" in layer or "sweep" in layer) and isinstance(tasks, dict) and \
        any(block is not None for block in tasks.values())


def effective_config(default, configfiles=(), overrides=None) -> dict:
    """The default file, then each config file, then the `--config` overrides (a mapping), each
    merged onto what came before (see `merge`); a layer's `models:` replaces the models below it, and
    so does a layer's `sweep:` section (its toys are the models) when it has no `models:`; such a
    layer's `tasks:` replaces the set of tasks below it (`runs_own_tasks`)."""
    cfg = load_layer(default) if default else {}
    for path in configfiles or ():
        cfg = overlay(cfg, load_layer(path))
    if overrides:
        cfg = overlay(cfg, cli_values(dict(overrides)))
    return cfg


# ---- Unknown keys ----------------------------------------------------------------------------------
# jsonschema reports an unknown key as "Additional properties are not allowed ('x' was unexpected)"
# without saying in which of the many nested blocks it stood; this walk names the full path.

def _resolve(schema: dict, root: dict) -> dict:
    """A subschema with its `$ref` (to `#/$defs/...`) expanded: the referenced schema's properties
    and the sibling properties together (siblings only add defaults or descriptions here)."""
    if "$ref" not in schema:
        return schema
    ref = schema["$ref"]
    if not ref.startswith("#/"):
        raise ConfigError(f"config schema: only local references are supported, got {ref!r}")
    target = root
    for part in ref[2:].split("/"):
        target = target[part]
    target = _resolve(target, root)
    out = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    props = dict(target.get("properties", {}))
    for k, v in schema.get("properties", {}).items():
        props[k] = {**props.get(k, {}), **v}
    if props:
        out["properties"] = props
    return out


def _walk(node, schema: dict, root: dict, path: list[str], out: list[str]) -> None:
    schema = _resolve(schema, root)
    if isinstance(node, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        closed = extra is False or schema.get("unevaluatedProperties", True) is False
        for key, value in node.items():
            if key in props:
                _walk(value, props[key], root, path + [str(key)], out)
            elif isinstance(extra, dict):
                _walk(value, extra, root, path + [str(key)], out)
            elif closed:
                where = ".".join(path)
                close = difflib.get_close_matches(str(key), list(props), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(props)})"
                out.append(f"config: {where + ': ' if where else ''}unknown key {key!r}{hint}")
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(node):
            _walk(value, schema["items"], root, path + [str(i)], out)


def unknown_keys(config: dict, schema: dict) -> list[str]:
    """One message per key the schema does not know, each naming the key and the dotted path of the
    block it stood in, e.g. "config: models.toy_mha.tasks.induction: unknown key 'n_scroe'"."""
    out: list[str] = []
    _walk(config, schema, schema, [], out)
    return out


def check_unknown_keys(config: dict, schema: dict) -> None:
    """Raise ConfigError listing every unknown key (a typo would otherwise silently mean the default)."""
    problems = unknown_keys(config, schema)
    if problems:
        raise ConfigError("\n".join(problems))


# ---- Validation, with the schema's defaults filled in -----------------------------------------------

def _with_defaults(validator_class):
    """A validator that also sets each absent property that has a `default` (in every block the
    schema reaches, `$ref` included), as Snakemake's own `validate` does."""
    check_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for key, sub in props.items():
                if "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from check_properties(validator, props, instance, schema)

    return validators.extend(validator_class, {"properties": properties})


_Validator = _with_defaults(Draft202012Validator)


def load_schema(schema_path) -> dict:
    """The schema file (parsed once per text, `_parsed`, by libyaml where present; a copy to change)."""
    return copy.deepcopy(_parsed(Path(schema_path).read_text(), getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


_TYPES = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
          "array": "a list", "object": "a mapping of keys to values", "null": "null"}


def _short(value, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 4] + " ..."


def _expected(error) -> str:
    """What the schema wanted where `error` stands, in words."""
    kind, want = error.validator, error.validator_value
    if kind == "type":
        return " or ".join(_TYPES.get(t, t) for t in ([want] if isinstance(want, str) else want))
    words = {"enum": lambda: "one of " + ", ".join(map(str, want)), "const": lambda: repr(want),
             "minimum": lambda: f"at least {want}", "maximum": lambda: f"at most {want}",
             "exclusiveMinimum": lambda: f"more than {want}", "exclusiveMaximum": lambda: f"less than {want}",
             "minItems": lambda: f"at least {want} item{'s' * (want != 1)}",
             "maxItems": lambda: f"at most {want} item{'s' * (want != 1)}",
             "uniqueItems": lambda: "no item twice",
             "pattern": lambda: error.schema.get("description") or f"a string matching {want}",
             "minProperties": lambda: f"at least {want} key{'s' * (want != 1)}"}
    return words[kind]() if kind in words else error.message


def schema_error(error) -> str:
    """One line for a jsonschema error: the dotted key, its value and what was expected, e.g.
    "config: tasks.ioi.n_score = 'twenty': expected an integer"."""
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return f"config: {where or '(top level)'}: missing the required key {missing[0]!r}"
    if "propertyNames" in error.relative_schema_path:  # the error is about a key, not a value
        return f"config: {where}: name {error.instance!r}: expected {_expected(error)}"
    return f"config: {where or '(top level)'} = {_short(error.instance)}: expected {_expected(error)}"


def validate(config: dict, schema: dict) -> None:
    """Check `config` against the schema, filling in its defaults in place. Every problem is one line
    of the ConfigError (see `schema_error`)."""
    problems = list(dict.fromkeys(map(schema_error, _Validator(schema).iter_errors(config))))
    if problems:
        raise ConfigError("\n".join(problems))


def main(argv=None) -> int:
    """`python -m circuitloc.plan.config.configload FILE...`: one line per config file that does not parse (file, line,
    column). Snakemake parses `--configfile` itself, before the workflow loads, naming neither."""
    bad = 0
    for path in (sys.argv[1:] if argv is None else argv):
        try:
            load_layer(path)
        except ConfigError as e:
            print(e, file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
