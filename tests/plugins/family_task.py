"""A task defined outside circuitloc with a family-shared condition: the test suite's proof that a
shared condition needs no edit of the pipeline. 'echo': a sequence of random words whose first word
comes back; the metric is the logit of the word that followed it the first time minus that of the
word before it. Each model keeps the sequences on which it does better than the candidates' lowest
quarter, so two models keep different sets; 'echo_shared' is the sequences every model of a family
kept (the spec's `shared`, built by `shared_dataset`)."""

from __future__ import annotations

from circuitloc.plan.vocabulary.vocab import TaskSpec

SPEC = TaskSpec("echo", __name__, ("echo_ld",), True, ("next_id", "prev_id"), align=("length",),
                shared="echo_shared")


def echo_ld(last_logits, batch):
    import torch

    idx = torch.arange(last_logits.shape[0])
    return last_logits[idx, batch["next_id"]] - last_logits[idx, batch["prev_id"]]


METRICS = {"echo_ld": echo_ld}


def build_dataset(tokenizer, prepend_bos, cfg, seed, **context):
    """n candidate sequences [x0 x1 ... xk x0] of distinct ordinary words, numbered (seq_id, the same
    sequence for every model of one vocabulary); kept where this model's echo_ld is above the
    candidates' lowest quarter; the first n_score kept for scoring."""
    import numpy as np
    import polars as pl
    import torch

    from circuitloc.tasks.common import mark_scoring

    words = sorted(i for t, i in tokenizer.get_vocab().items() if t.isalpha() and t.islower())
    rng = np.random.default_rng(seed)
    bos = [tokenizer.bos_token_id] if prepend_bos and tokenizer.bos_token_id is not None else []
    rows = []
    for i in range(int(cfg["n"])):
        k = int(rng.integers(5, 9))
        seq = [int(w) for w in rng.choice(words, size=k, replace=False)]
        rows.append({"seq_id": i, "input_ids": bos + seq + [seq[0]], "next_id": seq[1], "prev_id": seq[-1],
                     "length": k})
    df = pl.DataFrame(rows, schema={"seq_id": pl.Int64, "input_ids": pl.List(pl.Int64), "next_id": pl.Int64,
                                    "prev_id": pl.Int64, "length": pl.Int64})
    logits = context["last_logits"](df)
    ld = echo_ld(logits, {c: torch.tensor(df[c].to_numpy()) for c in ("next_id", "prev_id")}).detach().cpu().numpy()
    kept = df.filter(pl.Series(ld > np.quantile(ld, 0.25)))
    return mark_scoring(kept, int(cfg["n_score"])), {"input": len(df), "kept": len(kept)}


def shared_dataset(model, frames, n_score):
    """The sequences of `model`'s dataset that every family member kept (frames: {member: dataset})."""
    import polars as pl

    from circuitloc.tasks.common import mark_scoring

    ids = set.intersection(*(set(f["seq_id"].to_list()) for f in frames.values()))
    df = frames[model].filter(pl.col("seq_id").is_in(sorted(ids)))
    return mark_scoring(df, n_score), {"family_members": sorted(frames), "input": len(frames[model]),
                                       "kept": len(df)}
