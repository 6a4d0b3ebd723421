"""Factual recall: a curated set of one-token-answer facts, kept per model if the answer is in its top 3."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from ..errors import DatasetError
from .common import encode, single_token

FACTS = Path(__file__).resolve().parents[3] / "resources" / "facts" / "facts.tsv"
COLUMNS = ["domain", "subject", "relation", "answer", "natural", "qa"]


def load(path=None) -> pd.DataFrame:
    path = Path(path) if path else FACTS
    if not path.exists():
        raise DatasetError(f"facts file not found: {path}")
    df = pd.read_csv(path, sep="\t", keep_default_na=False, dtype=str)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"{path}: missing columns {missing}")
    df["qa"] = df["qa"].str.replace("\\n", "\n", regex=False)
    return df


def build(facts: pd.DataFrame, tokenizer, prepend_bos: bool, form: str):
    """Per-model candidates before the knowledge filter: the answer must be one token."""
    if form not in ("natural", "qa"):
        raise DatasetError(f"facts prompt form must be 'natural' or 'qa', got {form!r}")
    counts = {"input": int(len(facts))}
    df = facts.copy()
    df["prompt"] = df[form]
    df["answer_id"] = [single_token(tokenizer, a) for a in df["answer"]]
    ok = df["answer_id"].notna()
    counts["dropped_multitoken_answer"] = int((~ok).sum())
    df = df[ok].reset_index(drop=True)
    df["answer_id"] = df["answer_id"].astype("int64")
    df["input_ids"] = [encode(tokenizer, p, prepend_bos) for p in df["prompt"]]
    return df, counts


def known(last_logits: torch.Tensor, answer_id: torch.Tensor, k: int = 3) -> torch.Tensor:
    top = last_logits.topk(k, dim=-1).indices
    return (top == answer_id[:, None]).any(dim=-1)


def metric(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-fact top-1 correctness (1.0 or 0.0)."""
    return (last_logits.argmax(dim=-1) == batch["answer_id"]).float()


def logprob(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    logp = torch.log_softmax(last_logits.float(), dim=-1)
    return logp[torch.arange(logp.shape[0]), batch["answer_id"]]
