"""Your own prompts, each with two answer tokens: the metric is the logit difference
logit(answer) - logit(wrong answer) at the prompt's last position, as IOI's (`tasks.ioi.metric`),
and the floor 0 (the model no longer prefers the answer), so every stage runs them as IOI rows."""

from __future__ import annotations

import numbers

import polars as pl

from circuitloc.api.model import Model
from circuitloc.api.run import TaskData
from circuitloc.tasks.common import encode, mark_scoring


def _vocab_size(hf, tok) -> int:
    """The logits' width: the ids a metric may read (the output embedding's rows, else the tokenizer's size)."""
    out = hf.get_output_embeddings() if hasattr(hf, "get_output_embeddings") else None
    weight = getattr(out, "weight", None)
    return int(weight.shape[0]) if weight is not None else len(tok)


def _token(tok, answer, what: str, n_vocab: int) -> int:
    """A token id given as an id in [0, n_vocab), or as text that must be exactly one token (" Mary")
    the tokenizer knows: text it maps to its unknown token would score that token, for every answer
    it does not know alike."""
    if isinstance(answer, bool) or not isinstance(answer, (int, numbers.Integral, str)):
        raise ValueError(f"{what} {answer!r}: give one token as text (a str) or its id (an int)")
    if not isinstance(answer, str):
        if not 0 <= int(answer) < n_vocab:
            raise ValueError(f"{what} id {int(answer)} is outside this model's vocabulary (ids 0 to {n_vocab - 1})")
        return int(answer)
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{what} {answer!r} is {len(ids)} tokens for this tokenizer: give one token (or its id)")
    if tok.unk_token_id is not None and ids[0] == tok.unk_token_id and answer.strip() != tok.unk_token:
        raise ValueError(f"{what} {answer!r} is not in this tokenizer's vocabulary (it maps to the unknown token "
                         f"{tok.unk_token!r}): give a token it knows (or its id)")
    return int(ids[0])


def own_prompts(model: Model, texts, answers, wrong, n_score: int | None = None, groups=None) -> TaskData:
    """Prompts `texts` with their `answers` and `wrong` answers (one token each, as text or id). The
    first `n_score` prompts (default: half) rank the units, the rest are held out for the curves.
    `groups`: a label per prompt; prompts of one label are built alike (same template: positions line
    up), which mean and resample ablations use."""
    if not (len(texts) == len(answers) == len(wrong)) or not texts:
        raise ValueError(f"own_prompts: {len(texts)} texts, {len(answers)} answers, {len(wrong)} wrong answers: "
                         "give one answer and one wrong answer per text")
    hf, tok = model.loaded()
    n_vocab = _vocab_size(hf, tok)
    rows = pl.DataFrame({
        "input_ids": [encode(tok, t, model.card.prepend_bos) for t in texts],
        "io_id": [_token(tok, a, "answer", n_vocab) for a in answers],
        "s_id": [_token(tok, w, "wrong answer", n_vocab) for w in wrong],
        "template": list(groups) if groups is not None else [0] * len(texts),
    })
    return TaskData("ioi", mark_scoring(rows, len(texts) // 2 if n_score is None else int(n_score)), model.name)
