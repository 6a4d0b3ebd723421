"""The files a run reads that no job writes (the user's facts TSV, local fahamu/ioi parquet, a stored
toy's checkpoint, the shipped resources) checked while the run is planned: each exists, whether or
not the run's outputs do (one line naming the key that points at it), and the user's data files for
what needs no model: size, encoding, header, field counts, line length, the parquet's
magic bytes and its column. A malformed file then stops the dry run with one line naming it, not a
dataset job after the model jobs. The dataset job reads the facts file through the same check, so
both say the same line. Standard library only (the plan wing)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import builtin_tasks
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.config import views
from circuitloc.plan.jobs.checkpoints import CHECKPOINT_FILES
from circuitloc.plan.jobs.inputs import model_inputs, neutral_text, resource_path

FACTS_COLUMNS = ("domain", "subject", "relation", "answer", "natural", "qa")
MAX_FACTS_BYTES = 64 * 2**20  # the shipped file is 60 kB
MAX_LINE = 10_000  # characters of one facts line: a prompt far beyond any model's context


def facts_lines(path, error=ConfigError) -> list[tuple[int, str]]:
    """The non-blank lines of a facts TSV as (line number, text), header first, after checking its
    size, encoding, line lengths, header and field counts; a problem is `error` with one line naming
    the file (and the line)."""
    if not os.path.isfile(path):
        raise error(f"facts file not found: {path}")
    size = os.path.getsize(path)
    if size > MAX_FACTS_BYTES:
        raise error(f"{path}: {size} bytes, more than a facts file's limit of {MAX_FACTS_BYTES} bytes")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from e
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise error(f"{path}: empty file (expected a tab-separated header: {', '.join(FACTS_COLUMNS)})")
    for i, ln in lines:
        if len(ln) > MAX_LINE:
            raise error(f"{path}: line {i} has {len(ln)} characters, more than a facts line's limit of {MAX_LINE}")
    header = lines[0][1].split("\t")
    missing = [c for c in FACTS_COLUMNS if c not in header]
    if missing:
        raise error(f"{path}: missing columns {missing}")
    for i, ln in lines[1:]:
        if ln.count("\t") != len(header) - 1:
            raise error(f"{path}: line {i} has {ln.count(chr(9)) + 1} tab-separated fields, the header "
                        f"has {len(header)}")
    if len(lines) == 1:
        raise error(f"{path}: no facts (a header and no rows)")
    return lines


def check_parquet(path, column: str, error=ConfigError) -> None:
    """A parquet file's frame (the magic bytes at both ends, a footer that fits the file) and that its
    schema names `column`: a truncated, empty or foreign file, or one without the column, is one line."""
    size = os.path.getsize(path)
    if size == 0:
        raise error(f"{path}: empty file (0 bytes), not a fahamu/ioi parquet; download or copy it again")
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(size - 8, 0))
        tail = f.read(8)
        footer_len = int.from_bytes(tail[:4], "little") if len(tail) == 8 else -1
        ok = size >= 12 and head == b"PAR1" and tail[4:] == b"PAR1" and 0 < footer_len <= size - 12
        if ok:
            f.seek(size - 8 - footer_len)
            footer = f.read(footer_len)
    if not ok:
        raise error(f"{path}: not a readable parquet file, truncated or corrupt (its parquet frame is not whole); "
                    "download or copy it again")
    try:
        names = parquet_columns(footer)
    except (IndexError, ValueError, RecursionError):
        raise error(f"{path}: not a readable parquet file, its footer does not parse (truncated or corrupt); "
                    "download or copy it again") from None
    if column not in names:
        shown = ", ".join(map(repr, names[:8])) + (", ..." if len(names) > 8 else "")
        raise error(f"{path}: expected a column {column!r}, its schema has none of that name (its columns: "
                    f"{shown or 'none'})")


def parquet_columns(footer: bytes) -> list[str]:
    """The top-level column names of a parquet footer's schema (the names, not a substring of the
    footer's bytes, so `ioi_sentences_old` is not `ioi_sentences`). The footer is Thrift's compact
    protocol: FileMetaData's field 2 is the schema, a depth-first list of SchemaElement whose field
    4 is the name and field 5 the number of children (the root first); other fields are skipped by
    their type."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        out = shift = 0
        while True:
            b = footer[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return out

    def binary() -> bytes:
        nonlocal pos
        n = varint()
        if pos + n > len(footer):
            raise ValueError("a string past the footer's end")
        pos += n
        return footer[pos - n:pos]

    def skip(kind: int) -> None:
        nonlocal pos
        if kind in (1, 2):  # true, false: in the header
            return
        if kind == 3:  # byte
            pos += 1
        elif kind in (4, 5, 6):  # i16, i32, i64: zigzag varints
            varint()
        elif kind == 7:  # double
            pos += 8
        elif kind == 8:  # binary
            binary()
        elif kind in (9, 10):  # list, set
            size, elem = list_header()
            for _ in range(size):
                skip(elem)
        elif kind == 11:  # map
            size = varint()
            if size:
                kinds = footer[pos]
                pos += 1
                for _ in range(size):
                    skip(kinds >> 4)
                    skip(kinds & 0x0F)
        elif kind == 12:  # struct
            for _field, sub in fields():
                skip(sub)
        else:
            raise ValueError(f"unknown thrift type {kind}")

    def list_header() -> tuple[int, int]:
        nonlocal pos
        head = footer[pos]
        pos += 1
        size = head >> 4
        return (varint() if size == 15 else size), head & 0x0F

    def fields():
        nonlocal pos
        field = 0
        while True:
            head = footer[pos]
            pos += 1
            if head == 0:  # stop
                return
            delta, kind = head >> 4, head & 0x0F
            field = field + delta if delta else _zigzag(varint())
            yield field, kind

    elements: list[tuple[str, int]] = []  # (name, number of children), depth first
    for field, kind in fields():
        if field == 2 and kind == 9:  # the schema
            size, elem = list_header()
            for _ in range(size):
                if elem != 12:
                    raise ValueError("a schema element that is not a struct")
                name, children = "", 0
                for sub_field, sub_kind in fields():
                    if sub_field == 4 and sub_kind == 8:
                        name = binary().decode("utf-8", errors="replace")
                    elif sub_field == 5 and sub_kind == 5:
                        children = _zigzag(varint())
                    else:
                        skip(sub_kind)
                elements.append((name, children))
            return _top_level(elements)
        skip(kind)
    raise ValueError("no schema in the footer")


def _top_level(elements: list[tuple[str, int]]) -> list[str]:
    """The root's children's names, from the schema's depth-first (name, number of children) list."""
    def end(i: int) -> int:  # the index after element i's subtree
        j = i + 1
        for _ in range(max(elements[i][1], 0)):
            j = end(j)
        return j

    names, i = [], 1
    for _ in range(max(elements[0][1], 0) if elements else 0):
        names.append(elements[i][0])
        i = end(i)
    return names


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _task_key(config, task: str, model: str, keys: tuple) -> str | None:
    """The dotted key a task setting `keys` of `model` is read from: the model's override of the
    task's block (`models.<m>.tasks.<task>`) where it sets the first key, else the run's; None where
    neither sets it (a file shipped with circuitloc)."""
    own = (views.model_spec(config, model).get("tasks") or {}).get(task) or {}
    prefix, block = (f"models.{model}.tasks.{task}", own) if keys[0] in own else (f"tasks.{task}", config["tasks"][task])
    for k in keys:
        block = block.get(k) if isinstance(block, dict) else None
    return ".".join((prefix, *keys)) if block is not None else None


# a dataset input's config key below its task block, by the input's name (a task's `inputs`)
DATASET_KEYS = {"facts": ("path",), "fahamu": ("source", "path")}
# a toy model input's key below models.<m>.toy, by the input's name (plan.jobs.inputs.model_inputs)
TOY_KEYS = {"facts": "facts_path", **{k: "ioi_resources" for k in builtin_tasks.IOI_RESOURCES}}


def user_inputs(config, root):
    """(the config key that names it or None for a shipped file, its input name, path) of every file
    a job of this config reads that no job writes: the dataset jobs' (facts TSV, IOI parquet,
    resource files), the toys' (training resources, a stored checkpoint's files) and the
    specificity control's text; the same functions as the rules' inputs."""
    shipped = os.path.abspath(resource_path(root)) + os.sep
    for m in views.models(config):
        for t in views.model_tasks(config, m):
            for name, path in registry.dataset_inputs(t, views.task_config(config, t, m), resource_path(root)).items():
                if name in DATASET_KEYS:
                    key = _task_key(config, t, m, DATASET_KEYS[name])
                else:  # a shipped resource file, or an input a task of the user's own names from its block
                    key = None if os.path.abspath(path).startswith(shipped) else f"tasks.{t} (its input {name!r})"
                yield key, name, path
        recipe = views.model_spec(config, m).get("toy") or {}
        for name, path in model_inputs(config, root, SimpleNamespace(model=m)).items():
            key = "checkpoint" if name.startswith("checkpoint_") else TOY_KEYS.get(name)
            yield f"models.{m}.toy.{key}" if key in recipe else None, name, path
    yield "neutral_text" if config.get("neutral_text") else None, "neutral", neutral_text(config, root)


def missing_line(key: str | None, path: str) -> str:
    """The one line a missing input file stops the plan with, naming the key that points at it."""
    if key is None:
        return f"config: {path}: a file shipped with circuitloc is missing; restore it from the checkout"
    if key.endswith(".checkpoint"):
        folder, name = os.path.split(path)
        if not os.path.isdir(folder):
            return f"config: {key}: directory not found: {folder}"
        return (f"config: {key}: {folder} has no {name} (a stored toy's files: {', '.join(CHECKPOINT_FILES)})")
    return f"config: {key}: file not found: {path}"


def check_user_files(config, root, missing_ok: bool = False) -> None:
    """Every file a job of this config reads that no job writes exists, whether or not the run's
    outputs do (Snakemake skips a missing input whose consumers' outputs exist: a changed path would
    silently keep the old file's numbers); each facts TSV and local fahamu/ioi parquet a dataset job
    (or a toy's training) would read is checked for what needs no model. `missing_ok`: a missing
    file is passed over (a job's own process: the run that planned it checked it)."""
    seen = set()
    for key, name, path in user_inputs(config, root):
        if (name, path) in seen:
            continue
        seen.add((name, path))
        if not os.path.isfile(path):
            if missing_ok:
                continue
            raise ConfigError(missing_line(key, path))
        check = CHECKS.get(name)  # by the file's input key, as the task names its inputs
        if check:
            check(path)


# the check of each kind of user file, by the input key a task's `inputs` gives it
CHECKS = {"facts": facts_lines, "fahamu": lambda path: check_parquet(path, "ioi_sentences")}
