"""Indirect object identification: 'When Mary and John went to the store, John gave a drink to' -> Mary.

Two sources over the same 30 templates (resources/ioi/templates.txt: the IOI paper's 15 BABA
templates and their 15 ABBA forms, the templates fahamu/ioi was generated from): the seeded
generator, or fahamu/ioi (the dataset the paper used, or any file in its format), read lazily and
matched back to its templates; a sentence of fahamu's form from another template gets a template
id from its own skeleton.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import polars as pl
import torch

from circuitloc.errors import DatasetError
from circuitloc.plan.config.hub import FAHAMU_FILES, FAHAMU_REPO  # noqa: F401  (one place for the names: circuitloc.plan.config.hub)
from circuitloc.tasks.common import (
    encode,
    mark_scoring,
    sample_rows,
    single_token,
)
from circuitloc.tasks.fahamu import fahamu_source, read_fahamu
from circuitloc.tasks.ioi_templates import (
    RESOURCES,
    ROWS,
    fill,
    load_resources,
    load_templates,
    resource_lines,
    template_order,
)


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


UNKNOWN_TOKENS = ("drop", "keep")  # config tasks.ioi.unknown_tokens (default in config/schema.yaml: drop)


def _has_unknown(tokenizer, prompts) -> pl.Series:
    """Whether each prompt's own text holds the tokenizer's unknown token (a closed word-level
    vocabulary maps every word it lacks to it). The BOS is not looked at: GPT-2-style tokenizers
    give <|endoftext|> both roles."""
    unk = tokenizer.unk_token_id
    return pl.Series([unk is not None and unk in encode(tokenizer, p, False) for p in prompts], dtype=pl.Boolean)


def candidates(raw: pl.DataFrame, tokenizer, prepend_bos: bool, unknown: str = "drop"):
    """The sentences this tokenizer can be scored on, encoded: each prompt once, IO and S single
    tokens, and, unless `unknown` is keep, no unknown token in the prompt (the model would read a
    placeholder where the sentence has a word). Returns (rows, counts)."""
    if unknown not in UNKNOWN_TOKENS:
        raise DatasetError(f"tasks.ioi.unknown_tokens must be one of {', '.join(UNKNOWN_TOKENS)}, got {unknown!r}")
    counts = {"input": len(raw)}
    df = raw.unique(subset="prompt", keep="first", maintain_order=True)
    counts["dropped_duplicate"] = counts["input"] - len(df)
    df = df.with_columns(pl.Series("io_id", [single_token(tokenizer, w) for w in df["io"]], dtype=pl.Int64),
                         pl.Series("s_id", [single_token(tokenizer, w) for w in df["s"]], dtype=pl.Int64))
    ok = df["io_id"].is_not_null() & df["s_id"].is_not_null()
    counts["dropped_multitoken_name"] = int((~ok).sum())
    df = df.filter(ok)
    if len(df) == 0:
        raise DatasetError(f"no IOI sentence survives the dropped_multitoken_name filter (IO and S one token each "
                           f"in this tokenizer, with the leading space): it removed all {counts['dropped_multitoken_name']} "
                           f"left after the others ({counts})")
    unk = _has_unknown(tokenizer, df["prompt"])
    counts["dropped_unknown_token"] = int(unk.sum()) if unknown == "drop" else 0
    counts["kept_unknown_token"] = int(unk.sum()) if unknown == "keep" else 0
    if unknown == "drop":
        df = df.filter(~unk)
    if len(df) == 0:
        raise DatasetError(f"no IOI sentence survives the dropped_unknown_token filter (every prompt holds a word "
                           f"this tokenizer does not know): it removed all {counts['dropped_unknown_token']} left "
                           f"after the others ({counts}); set tasks.ioi.unknown_tokens: keep to score them anyway")
    df = df.with_columns(pl.Series("input_ids", [encode(tokenizer, p, prepend_bos) for p in df["prompt"]],
                                   dtype=pl.List(pl.Int64)))
    return df, counts


def pick(df: pl.DataFrame, counts: dict, n: int, n_score: int, seed: int):
    """n of the candidates in a seeded draw, the first n_score marked for scoring."""
    df = df[sample_rows(len(df), min(n, len(df)), seed)]
    counts = {**counts, "kept": len(df), "requested": int(n)}
    return mark_scoring(df, n_score), counts


def build(raw: pl.DataFrame, tokenizer, prepend_bos: bool, n: int, n_score: int, seed: int):
    """Keep sentences whose IO and S are single tokens and whose prompt has no unknown token
    (`candidates`); sample n; mark n_score."""
    df, counts = candidates(raw, tokenizer, prepend_bos)
    return pick(df, counts, n, n_score, seed)


def metric(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-prompt logit difference logit(IO) - logit(S) at the last position."""
    idx = torch.arange(last_logits.shape[0])
    return last_logits[idx, batch["io_id"]] - last_logits[idx, batch["s_id"]]


METRICS = {"ld": metric}


def build_dataset(tokenizer, prepend_bos: bool, cfg: dict, seed: int, inputs: dict | None = None, **context):
    """The IOI dataset for one model: `pool` candidates (config `n_generate`, default 4 n) from the
    generator or from fahamu/ioi, kept where IO and S are single tokens and (config
    `unknown_tokens`: drop) the prompt has no unknown token, n sampled, the first
    n_score marked for scoring. `inputs`: the resource files the rule declares (ioi_templates,
    ioi_names, ... or ioi_templates and fahamu); their directory is the resource directory.
    Returns (rows, counts)."""
    inputs = inputs or {}
    src = cfg.get("source") or {}
    declared = inputs.get("ioi_templates")
    res_dir = os.path.dirname(declared) if declared else None
    pool = int(cfg.get("n_generate", 4 * cfg["n"]))  # candidates drawn before the token filters
    if src.get("kind") == "fahamu":
        path, commit = fahamu_source({**src, "path": inputs.get("fahamu") or src.get("path")})
        root = Path(res_dir) if res_dir else RESOURCES  # places and objects: for sentences' own skeletons
        nouns = {k: resource_lines(Path(inputs.get(f"ioi_{k}") or root / f"{k}.txt")) for k in ("places", "objects")}
        raw, read_counts = read_fahamu(path, pool, seed, load_templates(res_dir), nouns=nouns)
        read_counts = {"source": str(path), **({"revision": commit} if commit else {}), **read_counts}
    else:
        raw, read_counts = generate(pool, seed, load_resources(res_dir)), {"source": "generate"}
    try:
        df, counts = candidates(raw, tokenizer, prepend_bos, cfg.get("unknown_tokens", "drop"))
    except DatasetError as e:  # every sentence filtered out: which names, for which model
        names = path if src.get("kind") == "fahamu" else \
            inputs.get("ioi_names") or Path(res_dir or RESOURCES) / "names.txt"
        raise DatasetError(f"{names}, model {context.get('model') or tokenizer.name_or_path}: {e}") from e
    df, counts = pick(df, counts, int(cfg["n"]), int(cfg["n_score"]), seed)
    return df, {**read_counts, **counts}
