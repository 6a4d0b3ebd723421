"""Factual recall: a curated set of one-token-answer facts, kept per model if the answer is in its top 3."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import torch

from circuitloc import shipped
from circuitloc.errors import DatasetError
from circuitloc.runner import log
from circuitloc.plan.config.userfiles import FACTS_COLUMNS, facts_lines
from circuitloc.tasks.common import drop_over_context, encode, mark_scoring, sample_rows, single_token

FACTS = shipped.resources() / "facts" / "facts.tsv"
COLUMNS = list(FACTS_COLUMNS)


def load(path=None) -> pl.DataFrame:
    """The facts file, checked line by line first, so that a malformed row is one error naming the
    file and the line instead of a shifted column or a parser's traceback. Fields are split on tabs
    only (no quote character: a `"` in a prompt is text)."""
    path = Path(path) if path else FACTS
    lines = facts_lines(path, DatasetError)  # the plan's check (circuitloc.plan.config.userfiles), as DatasetError
    body = "\n".join(ln for _, ln in lines).encode()
    df = pl.read_csv(body, separator="\t", quote_char=None, infer_schema=False, empty_string_is_null=False)
    return df.with_columns(pl.col("qa").str.replace_all("\\n", "\n", literal=True))


# one fact: its subject and its answer, whatever the relation's name and the prompt's wording (a
# renamed relation with a reworded prompt asks the same thing); compared without case or extra spaces
DEDUP = ["subject", "answer"]


def _same_fact(col: str) -> pl.Expr:
    return pl.col(col).str.strip_chars().str.replace_all(r"\s+", " ").str.to_lowercase()


def fact_key(df: pl.DataFrame) -> list[tuple]:
    """Each row's fact (`DEDUP`, without case or extra spaces)."""
    return list(df.select([_same_fact(c) for c in DEDUP]).iter_rows())


def build(facts: pl.DataFrame, tokenizer, prepend_bos: bool, form: str):
    """Per-model candidates before the knowledge filter: each fact once (a repeat would put one fact
    among both the scoring and the held-out rows), its answer one token."""
    if form not in ("natural", "qa"):
        raise DatasetError(f"facts prompt form must be 'natural' or 'qa', got {form!r}")
    counts = {"input": int(len(facts))}
    seen: set = set()
    first = [not (k in seen or seen.add(k)) for k in fact_key(facts)]  # each fact's first row
    facts = facts.filter(pl.Series(first, dtype=pl.Boolean))
    counts["dropped_duplicate"] = counts["input"] - len(facts)
    df = facts.with_columns(pl.col(form).alias("prompt"),
                            pl.Series("answer_id", [single_token(tokenizer, a) for a in facts["answer"]],
                                      dtype=pl.Int64))
    ok = df["answer_id"].is_not_null()
    counts["dropped_multitoken_answer"] = int((~ok).sum())
    df = df.filter(ok)
    df = df.with_columns(pl.Series("input_ids", [encode(tokenizer, p, prepend_bos) for p in df["prompt"]],
                                   dtype=pl.List(pl.Int64)))
    # the same prompt and answer as the model sees them (its tokens), under another subject or
    # relation name, is the same item too: counted with the repeated facts
    n = len(df)
    df = df.unique(subset=SEEN, keep="first", maintain_order=True)
    counts["dropped_duplicate"] += n - len(df)
    return df, counts


SEEN = ["input_ids", "answer_id"]  # a prompt as the model reads it and the token it should answer


def check_heldout(df: pl.DataFrame, what) -> None:
    """No scoring fact among the held-out rows, by its tokens (the prompt as the model reads it and
    its answer) or by its meaning (the same subject and answer, `DEDUP`, where the rows carry them):
    the held-out curves would measure units on facts that selected them."""
    score = df["score"].to_list()
    keys = [list(zip(map(tuple, df["input_ids"].to_list()), df["answer_id"].to_list()))]
    if all(c in df.columns for c in DEDUP):
        keys.append(fact_key(df))
    scoring = [{k for k, s in zip(key, score) if s} for key in keys]
    again = sum(1 for i, s in enumerate(score) if not s and any(key[i] in seen for key, seen in zip(keys, scoring)))
    if again:
        raise DatasetError(f"{what}: {again} held-out row(s) repeat a scoring fact (its prompt and answer, or its "
                           "subject and answer)")


def known(last_logits: torch.Tensor, answer_id: torch.Tensor, k: int = 3) -> torch.Tensor:
    top = last_logits.topk(k, dim=-1).indices
    return (top == answer_id[:, None]).any(dim=-1)


def accuracy(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-fact top-1 correctness (1.0 or 0.0)."""
    return (last_logits.argmax(dim=-1) == batch["answer_id"]).float()


metric = accuracy  # the toys' acceptance check (facts_acc) reads top-1 accuracy under this name


def margin(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-fact logit margin: logit[answer] - the largest logit of any other token.

    Why this, and not accuracy, is what damage, rankings and curves use by default: it is
    continuous, so a unit's drop is not counted in steps of 1/n with ties broken by layer order;
    it is invariant to a shift of all logits (as a logit difference is; a log-probability is not
    invariant to what the rest of the distribution does); and its sign is top-1 correctness
    (> 0: the answer is the argmax), so its floor 0, 'the answer no longer beats its best rival',
    is where accuracy's floor sits too."""
    x = last_logits.float()
    idx = torch.arange(x.shape[0])
    answer = x[idx, batch["answer_id"]]
    others = x.clone()
    others[idx, batch["answer_id"]] = float("-inf")
    return answer - others.max(dim=-1).values


def logprob(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-fact log-probability of the answer (its floor: -log(vocabulary size), a uniform guess)."""
    logp = torch.log_softmax(last_logits.float(), dim=-1)
    return logp[torch.arange(logp.shape[0]), batch["answer_id"]]


# config `tasks.facts.metric`: what damage, rankings and curves use (the others are reported beside it)
METRICS = {"margin": margin, "accuracy": accuracy, "logprob": logprob}


def build_dataset(tokenizer, prepend_bos: bool, cfg: dict, seed: int, **context):
    """The facts this model knows: one-token answers in the model's top `top_k` (config) at the
    prompt's last position, in a seeded shuffle, the first n_score marked for scoring. From the
    context (`tasks.registry`): `last_logits(rows)`, the model's clean last-position logits on those
    rows; `form` (natural | qa); `inputs["facts"]`, the facts file (default: config `path`, else
    the shipped set). Returns (rows, counts)."""
    path = (context.get("inputs") or {}).get("facts") or cfg.get("path")
    df, counts = build(load(path), tokenizer, prepend_bos, context.get("form", "natural"))
    if len(df) == 0:
        raise DatasetError(f"{path or FACTS}: no fact survives the dropped_multitoken_answer filter (the answer one "
                           f"token in this tokenizer, with the leading space) ({counts})")
    # before the knowledge filter, which runs the model on them
    df = drop_over_context(df, context.get("context_len"), counts, f"facts ({path or FACTS})")
    if len(df) == 0:
        raise DatasetError(f"{path or FACTS}: no fact fits the model's context of {context['context_len']} "
                           f"positions ({counts})")
    if counts["dropped_duplicate"]:
        log.info("facts (%s): %d repeated fact(s) dropped, each fact kept once (the same subject and answer, or "
                 "the same prompt and answer tokens, under another relation name or wording), so that no fact is "
                 "among both the scoring and the held-out rows", path or FACTS, counts["dropped_duplicate"])
    ok = known(context["last_logits"](df), torch.tensor(df["answer_id"].to_numpy()), int(cfg["top_k"]))
    counts["dropped_not_in_top_k"] = int((~ok).sum().item())
    df = df.filter(pl.Series(ok.numpy()))
    df = df[sample_rows(len(df), len(df), seed)]  # a seeded shuffle
    counts["kept"] = len(df)
    df = mark_scoring(df, int(cfg["n_score"]))
    check_heldout(df, path or FACTS)
    return df, counts


KEY = ["domain", "subject", "relation"]  # what makes two models' facts the same fact


def shared_dataset(model: str, frames: dict, n_score: int):
    """facts_shared: the rows of `model`'s facts dataset that every model of its family knows
    (frames: {member: its facts dataset}, matched on domain, subject and relation), the first
    n_score marked for scoring. Returns (rows, counts)."""
    shared = None
    for f in frames.values():
        k = set(f.select(KEY).iter_rows())
        shared = k if shared is None else shared & k
    df = frames[model]
    out = df.filter(pl.Series([r in shared for r in df.select(KEY).iter_rows()], dtype=pl.Boolean))
    if len(out) == 0:
        raise DatasetError(f"facts_shared/{model}: no fact is known by every model of its family "
                           f"({sorted(frames)})")
    return mark_scoring(out, n_score), {"family_members": sorted(frames), "input": len(df),
                                        "dropped_not_shared": len(df) - len(out), "kept": len(out)}
