"""Your own prompts, each with two answer tokens: the metric is the logit difference
logit(answer) - logit(wrong answer) at the prompt's last position, as IOI's (`tasks.ioi.metric`),
and the floor 0 (the model no longer prefers the answer), so every stage runs them as IOI rows."""

from __future__ import annotations

import polars as pl

from circuitloc.api.model import Model
from circuitloc.api.run import TaskData
from circuitloc.tasks.common import encode, mark_scoring


def _token(tok, answer, what: str) -> int:
    """A token id given as an id, or as text that must be exactly one token (" Mary")."""
    if isinstance(answer, int):
        return answer
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{what} {answer!r} is {len(ids)} tokens for this tokenizer: give one token (or its id)")
    return int(ids[0])


def own_prompts(model: Model, texts, answers, wrong, n_score: int | None = None, groups=None) -> TaskData:
    """Prompts `texts` with their `answers` and `wrong` answers (one token each, as text or id). The
    first `n_score` prompts (default: half) rank the units, the rest are held out for the curves.
    `groups`: a label per prompt; prompts of one label are built alike (same template: positions line
    up), which mean and resample ablations use."""
    if not (len(texts) == len(answers) == len(wrong)) or not texts:
        raise ValueError(f"own_prompts: {len(texts)} texts, {len(answers)} answers, {len(wrong)} wrong answers: "
                         "give one answer and one wrong answer per text")
    tok = model.loaded()[1]
    rows = pl.DataFrame({
        "input_ids": [encode(tok, t, model.card.prepend_bos) for t in texts],
        "io_id": [_token(tok, a, "answer") for a in answers],
        "s_id": [_token(tok, w, "wrong answer") for w in wrong],
        "template": list(groups) if groups is not None else [0] * len(texts),
    })
    return TaskData("ioi", mark_scoring(rows, len(texts) // 2 if n_score is None else int(n_score)), model.name)
