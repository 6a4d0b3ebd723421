"""Held-out checks and the acceptance gate.

The held-out sets: IOI sentences from another generator seed (none identical to a training
sentence), induction sequences from `tasks.induction.sequences` with an evaluation seed, and the
taught facts in natural form. Thresholds are strict: ioi_ld > t, ioi_acc > t, icl_loss < t,
facts_acc > t. A failing model with `enforce: true` is refused and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import torch

from circuitloc.tasks import facts as facts_task
from circuitloc.tasks import induction as induction_task
from circuitloc.tasks import ioi as ioi_task
from circuitloc.tasks.common import pad_right

# (metric, how it must compare with its threshold), in the order the verdict reports them
GATE = (("ioi_ld", ">"), ("ioi_acc", ">"), ("icl_loss", "<"), ("facts_acc", ">"))


@torch.no_grad()
def last_logits(model, seqs: list[list[int]], pad: int, chunk: int = 128) -> torch.Tensor:
    out = []
    for i in range(0, len(seqs), chunk):
        ids, last = pad_right(seqs[i : i + chunk], pad)
        logits = model(input_ids=ids).logits
        out.append(logits[torch.arange(len(last)), last].float())
    return torch.cat(out)


class Evaluator:
    """Held-out acceptance sets, built once."""

    def __init__(self, s, tok, ioi_res, taught, train_ioi_text: set):
        e, seed = s["eval"], int(s["eval"].get("seed", 12345)) + int(s["seed"])
        self.pad = tok.pad_token_id
        n = int(e["n_ioi"])
        raw = ioi_task.generate(4 * n + 50, seed=2_000_000 + seed, resources=ioi_res)
        raw = raw.filter(~pl.col("prompt").is_in(list(train_ioi_text)))
        self.ioi, _ = ioi_task.build(raw, tok, True, n, 0, seed)
        cand = induction_task.candidate_tokens(tok)
        self.ind = induction_task.sequences(cand, int(e["n_induction"]), e["prefix_len"], e["suffix_len"],
                                            3_000_000 + seed, tok.bos_token_id)
        self.facts, _ = facts_task.build(taught, tok, True, "natural")

    def __call__(self, model) -> dict:
        was = model.training
        model.eval()
        li = last_logits(model, self.ioi["input_ids"].to_list(), self.pad)
        ld = ioi_task.metric(li, {"io_id": torch.tensor(self.ioi["io_id"].to_numpy()),
                                  "s_id": torch.tensor(self.ioi["s_id"].to_numpy())})
        ln = last_logits(model, self.ind["input_ids"].to_list(), self.pad)
        icl = induction_task.metric(ln, {"b_id": torch.tensor(self.ind["b_id"].to_numpy())})
        lf = last_logits(model, self.facts["input_ids"].to_list(), self.pad)
        fa = facts_task.metric(lf, {"answer_id": torch.tensor(self.facts["answer_id"].to_numpy())})
        model.train(was)
        return {"ioi_ld": float(ld.mean()), "ioi_acc": float((ld > 0).float().mean()),
                "icl_loss": float(icl.mean()), "facts_acc": float(fa.mean()),
                "n_ioi": int(len(ld)), "n_induction": int(len(icl)), "n_facts": int(len(fa))}


def judge(m: dict, acc: dict) -> tuple[bool, list[str]]:
    """(every metric beats its threshold, one line per metric)."""
    ok, lines = True, []
    for k, op in GATE:
        t = float(acc[k])
        good = m[k] > t if op == ">" else m[k] < t
        ok &= good
        lines.append(f"{k} = {m[k]:.3f} (needs {op} {t}){'' if good else '  FAILED'}")
    return ok, lines


@dataclass(frozen=True)
class Verdict:
    """The gate's answer on one model."""

    checks: dict  # the metrics, `passed` and `thresholds`: what toy_checks.json and the card record
    passed: bool
    lines: tuple[str, ...]

    @property
    def summary(self) -> str:
        return "; ".join(self.lines)

    @property
    def word(self) -> str:
        return "PASSED" if self.passed else "FAILED"


def verdict(m: dict, acc: dict) -> Verdict:
    """The held-out metrics `m` judged against the recipe's `acceptance` block."""
    passed, lines = judge(m, acc)
    thresholds = {k: float(acc[k]) for k, _ in GATE}
    return Verdict({**m, "passed": bool(passed), "thresholds": thresholds}, bool(passed), tuple(lines))
