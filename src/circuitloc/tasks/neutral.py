"""Neutral text: plain next-token prediction on windows of an ordinary text, the specificity
control (does a task's top unit break language modelling in general?)."""

from __future__ import annotations

import numpy as np
import polars as pl

from circuitloc.errors import DatasetError
from circuitloc.tasks.common import read_text


def windows(text_path, tokenizer, prepend_bos: bool, n: int = 48, length: int = 24, seed: int = 0):
    """Windows of `length` tokens from a neutral text; each is scored on predicting the next token.
    Returns (rows, coverage): coverage is the share of the text's tokens that are not unknown (a
    closed toy vocabulary covers little of ordinary prose, and its loss there means nothing)."""
    ids = tokenizer(read_text(text_path, "neutral text"), add_special_tokens=False)["input_ids"]
    unk = tokenizer.unk_token_id
    coverage = 1.0 if unk is None else float(np.mean([i != unk for i in ids]))
    if len(ids) < length + 2:
        raise DatasetError(f"{text_path}: too short for windows of {length} tokens")
    starts = np.random.default_rng(seed).choice(len(ids) - length - 1, size=min(n, len(ids) - length - 1),
                                                replace=False)
    bos = [tokenizer.bos_token_id] if prepend_bos and tokenizer.bos_token_id is not None else []
    df = pl.DataFrame({"input_ids": [bos + ids[s : s + length] for s in starts],
                       "b_id": [ids[s + length] for s in starts], "length": [length] * len(starts),
                       "score": [True] * len(starts)},
                      schema={"input_ids": pl.List(pl.Int64), "b_id": pl.Int64, "length": pl.Int64,
                              "score": pl.Boolean})
    return df, coverage
