"""The synthetic training corpus: the taught facts, and a stream of batches mixing IOI sentences,
repeated random-token sequences (induction) and fact statements, each batch a pure function of the
recipe and the step."""

from __future__ import annotations

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
