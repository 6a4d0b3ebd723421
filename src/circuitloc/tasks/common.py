"""Tokenisation shared by every task: BOS convention, single-token answers, right padding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import torch

from circuitloc.errors import DatasetError
from circuitloc.prompts import Prompts
from circuitloc.runner import log


def read_text(path, what: str) -> str:
    """A user's text resource (IOI templates and word lists, the neutral text) as UTF-8, or one
    DatasetError naming the file: a missing, unreadable or binary file is not a traceback."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise DatasetError(f"{what} not found: {path}") from e
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: {what} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise DatasetError(f"{path}: cannot read the {what} ({e.strerror or e})") from e


def encode(tokenizer, text: str, prepend_bos: bool) -> list[int]:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if prepend_bos:
        if tokenizer.bos_token_id is None:
            raise ValueError("prepend_bos is set but the tokenizer has no BOS token")
        ids = [tokenizer.bos_token_id] + ids
    return ids


def single_token(tokenizer, word: str) -> int | None:
    """The id of ' word' if it is exactly one token in this tokenizer, else None."""
    ids = tokenizer(" " + word.strip(), add_special_tokens=False)["input_ids"]
    if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
        return None
    return int(ids[0])


def drop_over_context(df: pl.DataFrame, limit: int | None, counts: dict, what: str) -> pl.DataFrame:
    """The rows whose every token-id column (`*_ids`) fits the model's context of `limit` positions
    (None: no known limit); the rest are dropped and counted (`dropped_over_context`, with
    `context_positions`), and the job's log names the limit: a model fed past its positions computes
    on positions it was never trained on (or fails), silently."""
    cols = [c for c, t in df.schema.items() if c.endswith("_ids") and t == pl.List(pl.Int64)]
    if not limit or not cols or len(df) == 0:
        return df
    longest = df.select(pl.max_horizontal([pl.col(c).list.len() for c in cols]).alias("n"))["n"]
    ok = (longest <= int(limit)).to_numpy()
    if ok.all():
        return df
    counts["dropped_over_context"] = int((~ok).sum())
    counts["context_positions"] = int(limit)
    log.warning("%s: dropped %d prompt(s) longer than the model's context of %d positions (the longest %d "
                "tokens)", what, counts["dropped_over_context"], limit, int(longest.max()))
    return df.filter(pl.Series(ok))


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right padding keeps every real token at its own position under a causal mask, so no
    attention mask is needed; the metric reads each row at `last_pos`."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    last = torch.tensor([len(s) - 1 for s in seqs], dtype=torch.long)
    return ids, last


def sample_rows(n_rows: int, k: int, seed: int) -> np.ndarray:
    """k distinct row positions out of n_rows, drawn as pandas' DataFrame.sample(n=k, random_state=seed)
    drew them (numpy's legacy RandomState), so a seed picks the same rows as it always did."""
    return np.random.RandomState(seed).choice(n_rows, size=k, replace=False)


def mark_scoring(df: pl.DataFrame, n_score: int) -> pl.DataFrame:
    """`score`: True on the first n_score rows, the prompts that per-unit scores use."""
    return df.with_columns(score=pl.int_range(pl.len()) < int(n_score))


CURVE_PROMPTS = ("heldout", "all")


def curve_rows(score: np.ndarray, n_curve: int | None, prompts: str, what: str = "") -> np.ndarray:
    """The row positions a curve job runs (config `curves.prompts`), given the dataset's `score`
    column. heldout: the rows not marked for scoring, the first n_curve of them, so that the curves,
    Table 2 and the top unit's held-out score are measured on prompts that did not select the
    units; all: the first n_curve rows, scoring rows included (the paper's protocol). n_curve None:
    every such row. A filtered set (facts) may hold fewer rows than asked: the curve uses those
    there are (`n_prompts` in the curve table says how many); no held-out row at all is an error."""
    if prompts not in CURVE_PROMPTS:
        raise ValueError(f"curves.prompts must be one of {', '.join(CURVE_PROMPTS)}, got {prompts!r}")
    score = np.asarray(score, bool)
    pool = np.flatnonzero(~score) if prompts == "heldout" else np.arange(len(score))
    if len(pool) == 0:
        raise DatasetError(f"{what + ': ' if what else ''}no held-out prompts: all {len(score)} rows of the "
                           "dataset are scoring rows (n_score >= the rows there are); lower n_score, raise n, "
                           "or set curves.prompts: all")
    return pool if n_curve is None else pool[: int(n_curve)]


def pad_id(tokenizer) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id, 0):
        if tid is not None:
            return int(tid)
    return 0


def prompts(df: pl.DataFrame, task, pad: int, column: str = "input_ids") -> Prompts:
    """The dataset's rows as the engine's Prompts, with the per-prompt fields `task` reads."""
    ids, last = pad_right(df[column].to_list(), pad)
    fields = {f: torch.tensor(df[f].to_numpy(), dtype=torch.long) for f in task.fields}
    return Prompts(ids, last, fields)
