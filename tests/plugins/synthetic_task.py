"""A task defined outside circuitloc, through the task interface and the vocabulary only: the test
suite's proof that adding a task needs no edit of the pipeline. 'recall': a sequence of random
words in which the first word comes back; the metric is the logit of the word that followed it the
first time minus that of the word before it (higher is better, 0 when the model cannot tell)."""

from __future__ import annotations

from circuitloc.plan.vocabulary.vocab import Split, TaskSpec

SPEC = TaskSpec(
    "recall", __name__, ("recall_ld",), True, ("next_id", "prev_id"), align=("length",),
    splits=(Split("sequence length", "short", "long", "length"),),
)


def recall_ld(last_logits, batch):
    import torch

    idx = torch.arange(last_logits.shape[0])
    return last_logits[idx, batch["next_id"]] - last_logits[idx, batch["prev_id"]]


METRICS = {"recall_ld": recall_ld}


def build_dataset(tokenizer, prepend_bos, cfg, seed, **_):
    """n sequences [x0 x1 ... xk x0] of distinct ordinary words, the first n_score for scoring."""
    import numpy as np
    import polars as pl

    words = sorted(i for t, i in tokenizer.get_vocab().items() if t.isalpha() and t.islower())
    rng = np.random.default_rng(seed)
    bos = [tokenizer.bos_token_id] if prepend_bos and tokenizer.bos_token_id is not None else []
    rows = []
    for _ in range(int(cfg["n"])):
        k = int(rng.integers(5, 9))
        seq = [int(w) for w in rng.choice(words, size=k, replace=False)]
        rows.append({"input_ids": bos + seq + [seq[0]], "next_id": seq[1], "prev_id": seq[-1], "length": k})
    df = pl.DataFrame(rows, schema={"input_ids": pl.List(pl.Int64), "next_id": pl.Int64, "prev_id": pl.Int64,
                                    "length": pl.Int64})
    df = df.with_columns(score=pl.Series([i < int(cfg["n_score"]) for i in range(len(df))]))
    return df, {"input": len(df), "kept": len(df), "candidate_words": len(words)}
