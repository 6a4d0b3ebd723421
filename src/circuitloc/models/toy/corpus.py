"""The synthetic training corpus: the taught facts, and a stream of batches mixing IOI sentences,
repeated random-token sequences (induction) and fact statements, each batch a pure function of the
recipe and the step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from circuitloc.errors import ToyTrainingError
from circuitloc.models.toy.tokenizer import words
from circuitloc.tasks import ioi as ioi_task
from circuitloc.tasks.common import pad_right


def select_facts(facts_df: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """The taught facts: eligible ones (one-word answer, natural prompt not shared with a
    different answer), in a seeded shuffle, first `n`."""
    df = facts_df.with_columns(pl.Series("natural", [t.strip() for t in facts_df["natural"]], dtype=pl.String),
                               pl.Series("answer", [t.strip() for t in facts_df["answer"]], dtype=pl.String))
    one_word = pl.Series([len(words(a)) == 1 for a in df["answer"]], dtype=pl.Boolean)
    ok = one_word & (df.select(pl.col("answer").n_unique().over("natural"))["answer"] == 1) \
        & (df["natural"].str.len_chars() > 0)
    df = df.filter(ok).unique(subset="natural", keep="first", maintain_order=True)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0xFAC75])).permutation(len(df))
    return df[order[:n]]


def _counts(mix: dict, batch: int) -> dict:
    """Rows per task in a batch of `batch`: the mix's weights, rounded by largest remainder."""
    keys = ["ioi", "induction", "facts"]
    w = np.array([max(float(mix.get(k, 0)), 0.0) for k in keys])
    if w.sum() <= 0:
        raise ToyTrainingError("toy spec: mix has no positive weight")
    raw = w / w.sum() * batch
    n = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - n), kind="stable")[: batch - n.sum()]:
        n[i] += 1
    return dict(zip(keys, n.tolist()))


def training_ioi(s: dict, ioi_res: dict) -> pl.DataFrame:
    """Every IOI sentence the training stream draws from (held-out checks exclude them)."""
    n_ioi = max(_counts(s["mix"], int(s["batch"]))["ioi"] * int(s["steps"]), 1)
    return ioi_task.generate(n_ioi, seed=1_000_000 + int(s["seed"]), resources=ioi_res)


@dataclass(frozen=True)
class Packed:
    """A batch's rows packed into shared sequences: each row keeps its own positions (0, 1, ...) and
    attends only to its own earlier tokens (`mask`, [sequences, 1, length, length], True where a
    query may read a key), so every row computes what it would alone, on fewer padded positions."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    mask: torch.Tensor

    def model_inputs(self) -> dict:
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "attention_mask": self.mask}


def pack(ids: torch.Tensor, labels: torch.Tensor, pad_id: int) -> Packed:
    """Right-padded rows (`ids`, `labels`) packed first-fit, in row order, into sequences as long as
    the longest row: a pure function of the batch. A row's first label is always -100 (its <bos>),
    so no loss crosses from one row into the next. Padding positions attend to themselves alone (a
    query with no key would give NaN)."""
    lens = (ids != pad_id).sum(1).tolist()
    width = ids.shape[1]
    seqs: list[list] = []  # [used, [rows]]
    for r, n in enumerate(lens):
        for sq in seqs:
            if sq[0] + n <= width:
                sq[0] += n
                sq[1].append(r)
                break
        else:
            seqs.append([n, [r]])
    out_ids = torch.full((len(seqs), width), pad_id, dtype=ids.dtype)
    out_labels = torch.full((len(seqs), width), -100, dtype=labels.dtype)
    pos = torch.zeros((len(seqs), width), dtype=torch.long)
    seg = torch.full((len(seqs), width), -1, dtype=torch.long)
    for i, (_, rows) in enumerate(seqs):
        at = 0
        for r in rows:
            n = lens[r]
            out_ids[i, at:at + n] = ids[r, :n]
            out_labels[i, at:at + n] = labels[r, :n]
            pos[i, at:at + n] = torch.arange(n)
            seg[i, at:at + n] = r
            at += n
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    mask = (same & causal) | torch.eye(width, dtype=torch.bool)
    return Packed(out_ids, out_labels, pos, mask[:, None])


class Corpus:
    """The deterministic training stream: batch(step) is a pure function of (spec, step)."""

    def __init__(self, s, tok, ioi_res, taught, cand):
        self.s, self.tok, self.cand = s, tok, np.asarray(cand)
        self.n = _counts(s["mix"], int(s["batch"]))
        self.bos = tok.bos_token_id
        self.seed = int(s["seed"])
        raw = training_ioi(s, ioi_res)
        self.ioi_text = set(raw["prompt"])
        enc = tok([p + " " + io for p, io in zip(raw["prompt"], raw["io"])], add_special_tokens=False)["input_ids"]
        self.ioi = [[self.bos] + list(e) for e in enc]
        self.fact_rows = [[self.bos] + list(e) for e in tok(
            [p + " " + a for p, a in zip(taught["natural"], taught["answer"])], add_special_tokens=False)["input_ids"]]
        # loss-start offsets for `loss: targets` (index of the first target token in the row)
        self.ioi_tgt = [len(r) - 1 for r in self.ioi]
        self.fact_tgt = [len(r) - 1 for r in self.fact_rows]

    def batch(self, step: int):
        """(input_ids, labels) of step `step`; labels are -100 where no loss is taken."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0xDA7A, step]))
        rows, starts = [], []
        k0 = step * self.n["ioi"]
        for j in range(self.n["ioi"]):
            rows.append(self.ioi[(k0 + j) % len(self.ioi)])
            starts.append(self.ioi_tgt[(k0 + j) % len(self.ioi)])
        lo, hi = self.s["repeat_len"]
        for _ in range(self.n["induction"]):
            k = int(rng.integers(lo, hi + 1))
            x = [int(t) for t in rng.choice(self.cand, size=k, replace=False)]
            rows.append([self.bos] + x + x)
            starts.append(1 + k)
        for i in rng.integers(0, len(self.fact_rows), size=self.n["facts"]) if self.n["facts"] else []:
            rows.append(self.fact_rows[int(i)])
            starts.append(self.fact_tgt[int(i)])
        ids, _ = pad_right(rows, self.tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        first = 0 if self.s["loss"] == "targets" else 1
        for r, (row, st) in enumerate(zip(rows, starts)):
            a = st if self.s["loss"] == "targets" else first
            labels[r, a : len(row)] = ids[r, a : len(row)]
        return ids, labels
