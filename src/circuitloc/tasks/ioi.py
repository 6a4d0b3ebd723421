"""Indirect object identification: 'When Mary and John went to the store, John gave a drink to' -> Mary.

Two sources over the same 30 templates (resources/ioi/templates.txt: the IOI paper's 15 BABA
templates and their 15 ABBA forms, the templates fahamu/ioi was generated from): the seeded
generator, or fahamu/ioi (the dataset the paper used), read lazily and matched back to its templates.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import torch

from ..errors import DatasetError
from ..vocab import FAHAMU_FILES, FAHAMU_REPO, fahamu_file, fahamu_local_path  # noqa: F401
from .common import encode, mark_scoring, sample_rows, single_token

RESOURCES = Path(__file__).resolve().parents[3] / "resources" / "ioi"
FAHAMU_COLUMN = "ioi_sentences"
ROWS = {"prompt": pl.String, "io": pl.String, "s": pl.String, "order": pl.String, "template": pl.Int64}


def _lines(path: Path) -> list[str]:
    if not path.exists():
        raise DatasetError(f"IOI resource file not found: {path}")
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def template_order(template: str) -> str:
    """ABBA when the indirect object is named first, BABA when the subject is."""
    return "ABBA" if template.index("{IO}") < template.index("{S}") else "BABA"


def load_templates(root=None) -> list[str]:
    """fahamu/ioi's 30 templates, checked: one {IO}, two {S}, and both orders present."""
    path = (Path(root) if root else RESOURCES) / "templates.txt"
    templates = _lines(path)
    for t in templates:
        if t.count("{IO}") != 1 or t.count("{S}") != 2:
            raise DatasetError(f"{path}: a template needs one {{IO}} and two {{S}}: {t!r}")
    if {template_order(t) for t in templates} != {"ABBA", "BABA"}:
        raise DatasetError(f"{path}: needs ABBA templates ({{IO}} first) and BABA templates ({{S}} first)")
    return templates


def fill(template: str, io: str, s: str, place: str, obj: str) -> str:
    return (template.replace("{IO}", io).replace("{S}", s).replace("{PLACE}", place)
            .replace("{OBJECT}", obj))


def load_resources(root=None) -> dict[str, list[str]]:
    root = Path(root) if root else RESOURCES
    return {"templates": load_templates(root), **{k: _lines(root / f"{k}.txt") for k in ("names", "places", "objects")}}


def generate(n: int, seed: int, resources: dict | None = None) -> pl.DataFrame:
    """ABBA and BABA sentences in equal numbers (alternating), each from a template of its order."""
    res = resources or load_resources()
    rng = random.Random(seed)
    by_order = {o: [k for k, t in enumerate(res["templates"]) if template_order(t) == o] for o in ("ABBA", "BABA")}
    rows = []
    for i in range(n):
        order = "ABBA" if i % 2 == 0 else "BABA"
        k = rng.choice(by_order[order])
        io, s = rng.sample(res["names"], 2)
        text = fill(res["templates"][k], io, s, rng.choice(res["places"]), rng.choice(res["objects"]))
        rows.append({"prompt": text, "io": io, "s": s, "order": order, "template": k})
    return pl.DataFrame(rows, schema=ROWS)


# -- fahamu/ioi ------------------------------------------------------------------------------------
_SLOTS = {"{IO}": ("io", r"[A-Z][\w'-]*"), "{S}": ("s", r"[A-Z][\w'-]*"),
          "{PLACE}": ("place", r"[a-z][\w'-]*(?: [a-z][\w'-]*)*?"),
          "{OBJECT}": ("object", r"[a-z][\w'-]*(?: [a-z][\w'-]*)*?")}


def synthetic_fahamu(n: int, seed: int, resources: dict | None = None) -> pl.DataFrame:
    """fahamu/ioi-like rows drawn from the 30 templates and the shipped names, places and objects:
    the truth (prompt, io, s, order, template) and the full `sentence` as the dataset stores it
    (final name included, every third with a full stop). For tests and bench/, offline."""
    res = resources or load_resources()
    templates = res["templates"]
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = rng.randrange(len(templates))
        io, s = rng.sample(res["names"], 2)
        prompt = fill(templates[k], io, s, rng.choice(res["places"]), rng.choice(res["objects"]))
        rows.append({"prompt": prompt, "io": io, "s": s, "order": template_order(templates[k]), "template": k,
                     "sentence": f"{prompt} {io}" + ("." if i % 3 == 0 else "")})
    return pl.DataFrame(rows, schema={**ROWS, "sentence": pl.String})


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


def match_templates(sentences, templates: list[str]) -> tuple[pl.DataFrame, int]:
    """Each sentence's template, IO and S: rows (prompt, io, s, order, template) for the sentences
    that match one template exactly (IO and S distinct), and the number that match none."""
    patterns = [template_pattern(t) for t in templates]
    # most sentences share their first words with few templates: try those first
    by_start: dict[str, list[int]] = {}
    for k, t in enumerate(templates):
        by_start.setdefault(t.split(" ", 1)[0], []).append(k)
    rows, unmatched = [], 0
    for sent in sentences:
        sent = str(sent).strip()
        hit = None
        for k in by_start.get(sent.split(" ", 1)[0], []):
            m = patterns[k].fullmatch(sent)
            if m and m["io"] != m["s"]:
                hit = k, m
                break
        if hit is None:
            unmatched += 1
            continue
        k, m = hit
        io, s = m["io"], m["s"]
        prompt = fill(templates[k], io, s, m["place"] if "place" in m.re.groupindex else "",
                      m["object"] if "object" in m.re.groupindex else "")
        rows.append({"prompt": prompt, "io": io, "s": s, "order": template_order(templates[k]), "template": k})
    return pl.DataFrame(rows, schema=ROWS), unmatched


def fahamu_path(source: dict) -> Path:
    """The parquet file of a `{kind: fahamu}` source: `path` (a file, or a directory holding `file`),
    else `file` of the hub dataset `repo` from the Hugging Face cache (downloaded when online)."""
    name = fahamu_file(source)  # '200k' / '26m' as shorthands
    if source.get("path"):
        p = Path(fahamu_local_path(source))
        if not p.is_file():
            raise DatasetError(f"IOI parquet not found: {p} (tasks.ioi.source.path)")
        return p
    repo = source.get("repo", FAHAMU_REPO)
    from huggingface_hub import constants, hf_hub_download

    try:
        return Path(hf_hub_download(repo, name, repo_type="dataset"))
    except Exception as e:  # offline and not cached, or the hub unreachable
        raise DatasetError(
            f"{repo}: {name} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and could not be "
            f"downloaded ({type(e).__name__}; HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}). "
            f"Fetch it where there is internet, with the same HF_HOME: "
            f"hf download {repo} {name} --repo-type dataset") from e


def read_fahamu(path, pool: int | None, seed: int, templates: list[str] | None = None, window: int = 1_000_000):
    """A seeded sample of `pool` rows of a fahamu/ioi parquet (all rows if pool is None), matched
    to the templates. The file is scanned lazily (polars): only the row count and the sampled rows
    are ever materialised (a window of `window` rows at a time), so the 26 M-row file never loads
    whole. Rows come in file order. Returns (rows, counts)."""
    import polars as pl

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"IOI parquet not found: {path} (set tasks.ioi.source.path)")
    templates = templates or load_templates()
    lf = pl.scan_parquet(path)
    columns = lf.collect_schema().names()
    if FAHAMU_COLUMN not in columns:
        raise DatasetError(f"{path}: expected a column {FAHAMU_COLUMN!r}, found {columns}")
    n_rows = int(lf.select(pl.len()).collect().item())
    k = n_rows if pool is None else min(int(pool), n_rows)
    idx = np.sort(np.random.default_rng(seed).choice(n_rows, size=k, replace=False))
    # one window of rows at a time: a slice is pushed down into the parquet scan (only the row groups
    # it overlaps are read), so memory is bounded by the window, not the file
    sample: list[str] = []
    col = lf.select(FAHAMU_COLUMN)
    for start in range(0, n_rows, window):
        lo, hi = np.searchsorted(idx, [start, start + window])
        if hi > lo:
            chunk = col.slice(start, window).collect()[FAHAMU_COLUMN]
            sample += chunk.gather(idx[lo:hi] - start).to_list()
            del chunk
    rows, unmatched = match_templates(sample, templates)
    counts = {"source_rows": n_rows, "sampled": len(sample), "dropped_no_template": int(unmatched)}
    return rows, counts


def build(raw: pl.DataFrame, tokenizer, prepend_bos: bool, n: int, n_score: int, seed: int):
    """Keep sentences whose IO and S are single tokens for this tokenizer; sample n; mark n_score."""
    counts = {"input": int(len(raw))}
    df = raw.unique(subset="prompt", keep="first", maintain_order=True)
    counts["dropped_duplicate"] = counts["input"] - len(df)
    df = df.with_columns(pl.Series("io_id", [single_token(tokenizer, w) for w in df["io"]], dtype=pl.Int64),
                         pl.Series("s_id", [single_token(tokenizer, w) for w in df["s"]], dtype=pl.Int64))
    ok = df["io_id"].is_not_null() & df["s_id"].is_not_null()
    counts["dropped_multitoken_name"] = int((~ok).sum())
    df = df.filter(ok)
    if len(df) == 0:
        raise DatasetError("no IOI sentence survives the single-token name filter for this tokenizer")
    df = df[sample_rows(len(df), min(n, len(df)), seed)]
    counts["kept"] = int(len(df))
    counts["requested"] = int(n)
    df = df.with_columns(pl.Series("input_ids", [encode(tokenizer, p, prepend_bos) for p in df["prompt"]],
                                   dtype=pl.List(pl.Int64)))
    return mark_scoring(df, n_score), counts


def metric(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-prompt logit difference logit(IO) - logit(S) at the last position."""
    idx = torch.arange(last_logits.shape[0])
    return last_logits[idx, batch["io_id"]] - last_logits[idx, batch["s_id"]]


METRICS = {"ld": metric}


def build_dataset(tokenizer, prepend_bos: bool, cfg: dict, seed: int, inputs: dict | None = None, **_):
    """The IOI dataset for one model: `pool` candidates (config `n_generate`, default 4 n) from the
    generator or from fahamu/ioi, kept where IO and S are single tokens, n sampled, the first
    n_score marked for scoring. `inputs`: the resource files the rule declares (ioi_templates,
    ioi_names, ... or ioi_templates and fahamu); their directory is the resource directory.
    Returns (rows, counts)."""
    inputs = inputs or {}
    src = cfg.get("source") or {}
    declared = inputs.get("ioi_templates")
    res_dir = os.path.dirname(declared) if declared else None
    pool = int(cfg.get("n_generate", 4 * cfg["n"]))  # candidates drawn before the token filter
    if src.get("kind") == "fahamu":
        path = fahamu_path({**src, "path": inputs.get("fahamu") or src.get("path")})
        raw, read_counts = read_fahamu(path, pool, seed, load_templates(res_dir))
        read_counts = {"source": str(path), **read_counts}
    else:
        raw, read_counts = generate(pool, seed, load_resources(res_dir)), {"source": "generate"}
    df, counts = build(raw, tokenizer, prepend_bos, int(cfg["n"]), int(cfg["n_score"]), seed)
    return df, {**read_counts, **counts}
