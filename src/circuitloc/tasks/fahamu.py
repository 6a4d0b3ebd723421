"""Sentences of fahamu/ioi's form read back into IOI rows: a seeded sample of the parquet read
lazily (the 26 M-row file never loads whole), each sentence matched to its template, or given a
template id from its own skeleton; names told from other capitalised words."""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl

from circuitloc.errors import DatasetError
from circuitloc.plan.config import hub
from circuitloc.plan.config.hub import FAHAMU_FILES, FAHAMU_REPO  # noqa: F401  (one place for the names: circuitloc.plan.config.hub)
from circuitloc.tasks.ioi_templates import (
    FAHAMU_COLUMN,
    RESOURCES,
    ROWS,
    fill,
    load_templates,
    resource_lines,
    template_order,
)

# -- fahamu/ioi ------------------------------------------------------------------------------------
_SLOTS = {"{IO}": ("io", r"[A-Z][\w'-]*"), "{S}": ("s", r"[A-Z][\w'-]*"),
          "{PLACE}": ("place", r"[a-z][\w'-]*(?: [a-z][\w'-]*)*?"),
          "{OBJECT}": ("object", r"[a-z][\w'-]*(?: [a-z][\w'-]*)*?")}


def template_pattern(template: str) -> re.Pattern:
    """A full sentence of this template, with its final name: names and nouns are groups, a slot's
    later mentions must repeat its first, and the sentence may end in a full stop."""
    parts, seen = [], set()
    for piece in re.split(r"(\{IO\}|\{S\}|\{PLACE\}|\{OBJECT\})", template + " {IO}"):
        if piece in _SLOTS:
            name, rx = _SLOTS[piece]
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>{rx})")
            seen.add(name)
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + r"\s*\.?")


_NAME = r"[A-Z][\w'-]*"


def _words(text: str, word: str) -> list[int]:
    return [m.start() for m in re.finditer(rf"(?<![\w'-]){re.escape(word)}(?![\w'-])", text)]


def final_name(sentence: str) -> str | None:
    """The name a sentence of fahamu's form ends in (its IO), or None."""
    m = re.fullmatch(rf".*\S\s+({_NAME})\s*\.?", str(sentence).strip())
    return m[1] if m else None


def parse_sentence(sentence: str, nouns: dict | None = None, names=frozenset()):
    """Any sentence of fahamu's form, whatever its template: IO is the final name (once before it in
    the sentence), S the one capitalised word said twice before it. Where several are (a sentence
    that opens "Then, ..." and again "... Then John gave"), S is the one that is a name, a word in
    `names`: a capitalised word that merely begins both sentences fills no name slot. Returns
    (prompt, io, s, order, skeleton) or None; the skeleton is the prompt with IO, S and every place
    and object of `nouns` (the shipped lists by default) replaced by their slots, so sentences of
    one template share it."""
    m = re.fullmatch(rf"(?P<prompt>.*\S)\s+(?P<io>{_NAME})\s*\.?", sentence.strip())
    if m is None:
        return None
    prompt, io = m["prompt"], m["io"]
    counts = Counter(w for w in re.findall(rf"(?<![\w'-]){_NAME}", prompt))
    subjects = [w for w, c in counts.items() if c == 2 and w != io]
    if len(subjects) > 1:
        subjects = [w for w in subjects if w in names]
    if counts[io] != 1 or len(subjects) != 1:
        return None
    s = subjects[0]
    order = "ABBA" if _words(prompt, io)[0] < _words(prompt, s)[0] else "BABA"
    skeleton = prompt
    for word, slot in ((io, "{IO}"), (s, "{S}")):
        skeleton = re.sub(rf"(?<![\w'-]){re.escape(word)}(?![\w'-])", slot, skeleton)
    for key, slot in (("places", "{PLACE}"), ("objects", "{OBJECT}")):
        for noun in sorted((nouns or {}).get(key, ()), key=len, reverse=True):  # "train station" before "station"
            skeleton = re.sub(rf"(?<![\w'{{-]){re.escape(noun)}(?![\w'}}-])", slot, skeleton)
    return prompt, io, s, order, skeleton


def skeleton_id(skeleton: str, templates: list[str]) -> int:
    """A template id for a skeleton: its line in templates.txt if it is one of them, else a stable
    number from its text (>= 2**32, never a line number; the same in every run and for every model,
    so mean and resample ablation align its sentences)."""
    if skeleton in templates:
        return templates.index(skeleton)
    return 2**32 + int(hashlib.sha256(skeleton.encode()).hexdigest()[:12], 16)


def _shipped_nouns() -> dict:
    return {k: resource_lines(RESOURCES / f"{k}.txt") for k in ("places", "objects", "names")}


def match_templates(sentences, templates: list[str], nouns: dict | None = None) -> tuple[pl.DataFrame, dict]:
    """Each sentence's template, IO and S: rows (prompt, io, s, order, template) and counts. A
    sentence that matches one of `templates` exactly (IO and S distinct) gets its line; any other
    sentence of fahamu's form gets an id from its own skeleton (`parse_sentence`, `skeleton_id`);
    the rest are dropped. `nouns`: places, objects and names (the shipped lists by default); a
    name is a word of `names` or one that fills the IO slot (ends a sentence) somewhere among
    `sentences`, so names the list lacks still tell S from a repeated capitalised word. Counts:
    matched_template, own_template, dropped_unparsed."""
    nouns = _shipped_nouns() if nouns is None else nouns
    sentences = [str(x).strip() for x in sentences]
    names = set(nouns.get("names", ())) | {n for n in map(final_name, sentences) if n}
    patterns = [template_pattern(t) for t in templates]
    # most sentences share their first words with few templates: try those first; a template that
    # begins with a slot ({S} and {IO} were ...) is tried for every sentence
    by_start: dict[str, list[int]] = {}
    anywhere: list[int] = []
    for k, t in enumerate(templates):
        first = t.split(" ", 1)[0]
        if "{" in first:
            anywhere.append(k)
        else:
            by_start.setdefault(first, []).append(k)
    rows, counts = [], {"matched_template": 0, "own_template": 0, "dropped_unparsed": 0}
    for sent in sentences:
        hit = None
        for k in by_start.get(sent.split(" ", 1)[0], []) + anywhere:
            m = patterns[k].fullmatch(sent)
            if m and m["io"] != m["s"]:
                hit = k, m
                break
        if hit is not None:
            k, m = hit
            io, s = m["io"], m["s"]
            prompt = fill(templates[k], io, s, m["place"] if "place" in m.re.groupindex else "",
                          m["object"] if "object" in m.re.groupindex else "")
            rows.append({"prompt": prompt, "io": io, "s": s, "order": template_order(templates[k]), "template": k})
            counts["matched_template"] += 1
            continue
        parsed = parse_sentence(sent, nouns, names)
        if parsed is None:
            counts["dropped_unparsed"] += 1
            continue
        prompt, io, s, order, skeleton = parsed
        rows.append({"prompt": prompt, "io": io, "s": s, "order": order, "template": skeleton_id(skeleton, templates)})
        counts["own_template"] += 1
    return pl.DataFrame(rows, schema=ROWS), counts


def fahamu_source(source: dict) -> tuple[Path, str | None]:
    """(parquet path, snapshot commit or None) of a `{kind: fahamu}` source: the local `path`, else
    `file` of the hub dataset `repo` at `revision` from the Hugging Face cache (downloaded when
    online; offline, a file missing from the cache is an error naming the cache and the command
    that fetches it)."""
    name = hub.fahamu_file(source)
    local = hub.local_fahamu(source)
    if local:
        p = Path(local)
        if not p.is_file():
            raise DatasetError(f"IOI parquet not found: {p} (tasks.ioi.source.path)")
        return p, None
    repo = source.get("repo") or FAHAMU_REPO
    revision = source.get("revision")
    from huggingface_hub import constants, hf_hub_download

    try:
        path = Path(hf_hub_download(repo, name, repo_type="dataset", revision=revision))
    except Exception as e:  # offline and not cached, or the hub unreachable
        rev = f" --revision {revision}" if revision else ""
        raise DatasetError(
            f"{repo}: {name}{f' at revision {revision}' if revision else ''} is not in the Hugging Face cache "
            f"{constants.HF_HUB_CACHE} and could not be downloaded ({type(e).__name__}; "
            f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}). Fetch it where there is internet, "
            f"with the same HF_HOME: hf download {repo} {name} --repo-type dataset{rev}") from e
    return path, hub.snapshot_commit(path)


def _unreadable(path, e: Exception) -> DatasetError:
    """One line for a parquet the reader cannot decode: invalid UTF-8 text, or a file that is not
    (or no longer whole) parquet."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "utf-8" in first.lower() or "utf8" in first.lower():
        return DatasetError(f"{path}: column {FAHAMU_COLUMN!r} is not valid UTF-8 text ({first}); "
                            "re-export the file with string sentences")
    return DatasetError(f"{path}: not a readable parquet file, truncated or corrupt ({type(e).__name__}: "
                        f"{first}); download or copy it again")


def _scan(path: Path):
    """(the sentence column, lazily, as text; the row count) of a fahamu parquet. A binary column is
    decoded as UTF-8, strictly: a byte that is not UTF-8 is an error, never a sentence that silently
    fails to parse."""
    lf = pl.scan_parquet(path)
    schema = lf.collect_schema()
    if FAHAMU_COLUMN not in schema:
        raise DatasetError(f"{path}: expected a column {FAHAMU_COLUMN!r}, found {schema.names()}")
    dtype = schema[FAHAMU_COLUMN]
    if dtype not in (pl.String, pl.Binary):
        raise DatasetError(f"{path}: column {FAHAMU_COLUMN!r} holds {dtype}, not text")
    col = lf.select(pl.col(FAHAMU_COLUMN).cast(pl.String, strict=True))
    return col, int(lf.select(pl.len()).collect().item())


def _gather(col, idx: np.ndarray, n_rows: int, window: int) -> list[str]:
    """The rows at `idx` (sorted), one window of rows at a time: a slice is pushed down into the
    parquet scan (only the row groups it overlaps are read), so memory is bounded by the window,
    not the file."""
    sample: list[str] = []
    for start in range(0, n_rows, window):
        lo, hi = np.searchsorted(idx, [start, start + window])
        if hi > lo:
            chunk = col.slice(start, window).collect()[FAHAMU_COLUMN]
            sample += chunk.gather(idx[lo:hi] - start).to_list()
            del chunk
    return sample


def read_fahamu(path, pool: int | None, seed: int, templates: list[str] | None = None, window: int = 1_000_000,
                nouns: dict | None = None):
    """A seeded sample of `pool` rows of a fahamu/ioi parquet (all rows if pool is None), matched
    to the templates. The file is scanned lazily (polars): only the row count and the sampled rows
    are ever materialised (a window of `window` rows at a time), so the 26 M-row file never loads
    whole. Rows come in file order. An empty, truncated or undecodable file is one DatasetError
    naming it (never blamed on a filter). Returns (rows, counts)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"IOI parquet not found: {path} (set tasks.ioi.source.path)")
    if path.stat().st_size == 0:
        raise DatasetError(f"{path}: empty file (0 bytes), not a fahamu/ioi parquet; download or copy it again")
    templates = templates or load_templates()
    try:
        col, n_rows = _scan(path)
        if n_rows == 0:
            raise DatasetError(f"{path}: empty: the parquet file has no rows")
        k = n_rows if pool is None else min(int(pool), n_rows)
        sample = _gather(col, np.sort(np.random.default_rng(seed).choice(n_rows, size=k, replace=False)),
                         n_rows, window)
    except DatasetError:
        raise
    except Exception as e:  # polars raises several types for one meaning: undecodable
        raise _unreadable(path, e) from e
    if not any(s and str(s).strip() for s in sample):
        raise DatasetError(f"{path}: empty: every one of the {len(sample)} sampled sentences in "
                           f"{FAHAMU_COLUMN!r} is blank or null")
    rows, matched = match_templates(sample, templates, nouns)
    counts = {"source_rows": n_rows, "sampled": len(sample), **matched}
    if len(rows) == 0:
        raise DatasetError(f"{path}: no sentence of fahamu's form (a final name said once before it, a "
                           f"subject said twice) among the {len(sample)} sampled rows: the "
                           f"dropped_unparsed filter removed them all ({counts})")
    return rows, counts
