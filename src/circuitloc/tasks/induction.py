"""Induction: [prefix][A][B][suffix][A] -> B, on random ordinary tokens of the model's own vocabulary."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import torch

from circuitloc.errors import DatasetError
from circuitloc.tasks.common import mark_scoring, prompts

_SPACED = re.compile(r" [a-z]{3,10}")
_BARE = re.compile(r"[a-z]{3,10}")


def candidate_tokens(tokenizer, min_count: int = 200) -> list[int]:
    """Lowercase word tokens that carry their own leading space, so that neighbours cannot merge
    with them; word-level tokenizers (no leading spaces) fall back to bare lowercase words."""
    special = set(tokenizer.all_special_ids)
    vocab = sorted(set(tokenizer.get_vocab().values()) - special)
    decoded = {i: tokenizer.decode([i]) for i in vocab}
    spaced = [i for i, s in decoded.items() if _SPACED.fullmatch(s)]
    if len(spaced) >= min_count:
        return spaced
    bare = [i for i, s in decoded.items() if _BARE.fullmatch(s)]
    if len(bare) < min_count:
        raise DatasetError(f"only {len(bare)} ordinary word tokens in this vocabulary (need {min_count})")
    return bare


def sequences(candidates: list[int], n: int, prefix_len, suffix_len, seed: int, bos_id: int | None) -> pl.DataFrame:
    """Every token in a sequence is distinct except the repeated A; the matched no-repeat sequence
    replaces the first [A][B] with two fresh tokens and keeps the same target B."""
    rng = np.random.default_rng(seed)
    cand = np.asarray(candidates)
    rows = []
    for i in range(n):
        p = int(rng.integers(prefix_len[0], prefix_len[1] + 1))
        s = int(rng.integers(suffix_len[0], suffix_len[1] + 1))
        toks = [int(t) for t in rng.choice(cand, size=p + s + 4, replace=False)]
        prefix, (a, b, x, y), suffix = toks[:p], toks[p : p + 4], toks[p + 4 :]
        head = [bos_id] if bos_id is not None else []
        seq = head + prefix + [a, b] + suffix + [a]
        norep = head + prefix + [x, y] + suffix + [a]
        rows.append({"input_ids": seq, "norep_ids": norep, "a_id": a, "b_id": b,
                     "b_pos": len(head) + p + 1, "prefix_len": p, "suffix_len": s})
    return pl.DataFrame(rows, schema={"input_ids": pl.List(pl.Int64), "norep_ids": pl.List(pl.Int64),
                                      "a_id": pl.Int64, "b_id": pl.Int64, "b_pos": pl.Int64,
                                      "prefix_len": pl.Int64, "suffix_len": pl.Int64})


def metric(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-sequence ICL loss: cross-entropy of B at the last position (lower is better)."""
    logp = torch.log_softmax(last_logits.float(), dim=-1)
    return -logp[torch.arange(logp.shape[0]), batch["b_id"]]


# icl_loss on the task's sequences; loss: the same next-token loss on neutral text (specificity)
METRICS = {"icl_loss": metric, "loss": metric}


def build_dataset(tokenizer, prepend_bos: bool, cfg: dict, seed: int, **_):
    """n sequences over the model's own word tokens, the first n_score marked for scoring.
    Returns (rows, counts)."""
    cands = candidate_tokens(tokenizer)
    df = sequences(cands, int(cfg["n"]), cfg["prefix_len"], cfg["suffix_len"], seed,
                   tokenizer.bos_token_id if prepend_bos else None)
    df = mark_scoring(df, int(cfg["n_score"]))
    return df, {"input": len(df), "candidate_tokens": len(cands), "kept": len(df), "requested": int(cfg["n"])}


def floor_per_prompt(job) -> np.ndarray:
    """The loss with the task gone: each prompt's own no-repeat sequence (its first [A][B]
    replaced by random tokens), the same final token predicted."""

    p = prompts(job.df, job.task, job.pad, column="norep_ids")
    name = job.task.metric_name
    return job.scanner.run(p, [{}], {name: job.task.metric})[name][0].numpy().astype(float)


def unit_columns(job) -> pl.DataFrame:
    """attn_score: mean attention from the last position to B's position (the ABA offset), per
    query head; for kv and layer units, the mean over the unit's query heads."""

    per_head = induction_scores(job.bridge, job.prompts.input_ids, job.prompts.last_pos,
                                torch.tensor(job.df["b_pos"].to_numpy()), job.card.n_layers)
    return pl.DataFrame([{"layer": u.layer, "head": u.head,
                          "attn_score": float(per_head[u.layer, list(u.heads)].mean())} for u in job.units],
                        schema={"layer": pl.Int64, "head": pl.Int64, "attn_score": pl.Float64})


# -- attention-pattern head scores, read from TransformerLens' blocks.{l}.attn.hook_pattern ----------
def _patterns(bridge, input_ids: torch.Tensor, n_layers: int) -> list[torch.Tensor]:
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]
    with torch.no_grad():
        _, cache = bridge.run_with_cache(input_ids, names_filter=lambda n: n in names)
    return [cache[n].float().cpu() for n in names]  # each [N, H, T, T]


def induction_scores(bridge, input_ids, last_pos, b_pos, n_layers: int) -> torch.Tensor:
    """[L, H]: mean attention from the final A to B, the token after A's first occurrence."""
    rows = torch.arange(len(b_pos))
    return torch.stack([p[rows, :, last_pos, b_pos].mean(0) for p in _patterns(bridge, input_ids, n_layers)])

