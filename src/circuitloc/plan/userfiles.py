"""The user's own data files (a facts TSV, a local fahamu/ioi parquet) checked while the run is
planned, for what needs no model: size, encoding, header, field counts, line length, the parquet's
magic bytes and its column. A malformed file then stops the dry run with one line naming it, not a
dataset job after the model jobs. The dataset job reads the facts file through the same check, so
both say the same line. Standard library only (the plan wing)."""

from __future__ import annotations

import os

from circuitloc.errors import ConfigError
from circuitloc.plan import registry, views
from circuitloc.plan.inputs import resource_path

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
    if column.encode() not in footer:
        raise error(f"{path}: expected a column {column!r}, its schema has none of that name")


def check_user_files(config, root) -> None:
    """Every facts TSV and local fahamu/ioi parquet a dataset job of this config would read."""
    seen = set()
    for m in views.models(config):
        for t in views.model_tasks(config, m):
            files = registry.dataset_inputs(t, views.task_config(config, t, m), resource_path(root))
            for kind, path in files.items():
                if (kind, path) in seen or not os.path.isfile(path):
                    continue  # a missing file: Snakemake names it as a missing input
                seen.add((kind, path))
                check = CHECKS.get(kind)  # by the file's input key, as the task names its inputs
                if check:
                    check(path)


# the check of each kind of user file, by the input key a task's `inputs` gives it
CHECKS = {"facts": facts_lines, "fahamu": lambda path: check_parquet(path, "ioi_sentences")}
