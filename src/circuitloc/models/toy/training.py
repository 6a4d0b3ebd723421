"""Training one toy from its resolved recipe, then judging and writing it.

AdamW (betas 0.9/0.98), gradient clip 1.0, linear warmup then constant lr. The loss is next-token
cross-entropy on every real (non-padding) token of every row (`loss: all`); with `loss: targets`
it is restricted to the IO name of IOI rows, the repeated half of induction rows and the answer of
fact rows.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch

from circuitloc.errors import ToyTrainingError
from circuitloc.io import atomic_dir, write_json, writing
from circuitloc.models.toy.corpus import Corpus, pack, select_facts
from circuitloc.models.toy.evaluation import Evaluator, verdict
from circuitloc.models.toy.exact import ExactAdamW
from circuitloc.models.toy.model import build_model
from circuitloc.models.toy.tokenizer import build_tokenizer
from circuitloc.tasks import facts as facts_task
from circuitloc.tasks import induction as induction_task
from circuitloc.tasks import ioi as ioi_task


def optimizer(model, s: dict):
    """AdamW with weight decay on matrices only, and a linear warm-up to a constant rate (cosine
    decay stalled induction); its square root exactly rounded (exact.ExactAdamW: the same toy on
    every CPU). Returns (optimizer, scheduler)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = ExactAdamW([{"params": decay, "weight_decay": float(s["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(s["lr"]), betas=tuple(s["betas"]), eps=1e-8)
    warm = max(int(s["warmup"]), 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warm) if warm else 1.0)
    return opt, sched


@dataclass(frozen=True)
class Loop:
    """The loop's settings, read from the recipe once."""

    steps: int
    clip: float
    lr: object  # as the recipe spells it: the divergence message quotes it
    log_every: int  # 0: only the last step is logged
    eval_every: int  # 0: no held-out checks during training

    @classmethod
    def of(cls, s: dict) -> Loop:
        return cls(int(s["steps"]), float(s["clip"]), s["lr"], int(s["log_every"] or 0), int(s["eval_every"] or 0))

    def evaluates(self, done: int) -> bool:
        """Whether the held-out checks run after `done` steps (the last step's run after the loop)."""
        return bool(self.eval_every and done % self.eval_every == 0 and done != self.steps)

    def logs(self, done: int) -> bool:
        """Whether a log record closes after `done` steps."""
        return bool((self.log_every and done % self.log_every == 0) or done == self.steps or self.evaluates(done))


@dataclass(frozen=True)
class ToyRun:
    """What one training run is built from, made once before its first step."""

    s: dict  # the resolved recipe
    tok: object
    taught: pl.DataFrame
    corpus: Corpus
    evaluator: Evaluator
    model: torch.nn.Module

    @property
    def n_params(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters()))


def prepare(s: dict) -> ToyRun:
    """Seed every generator, then build vocabulary, model, training stream and held-out sets (in
    this order: the model's construction draws from the seeded torch generator)."""
    seed = int(s["seed"])
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    ioi_res = ioi_task.load_resources(s["ioi_resources"])
    taught = select_facts(facts_task.load(s["facts_path"]), int(s["n_facts"]), seed)
    tok, _ = build_tokenizer(ioi_res, taught, int(s["pool_size"]), seed)
    cand = induction_task.candidate_tokens(tok)
    model = build_model(s, len(tok), tok)
    corpus = Corpus(s, tok, ioi_res, taught, cand)
    evaluator = Evaluator(s, tok, ioi_res, taught, corpus.ioi_text)
    return ToyRun(s, tok, taught, corpus, evaluator, model)


def describe(run: ToyRun) -> str:
    s = run.s
    return (f"toy: {s['n_layers']}L d{s['d_model']} {s['n_heads']}q/{s['n_kv_heads']}kv heads, "
            f"{run.n_params / 1e6:.2f}M params, vocab {len(run.tok)} ({len(run.corpus.cand)} induction tokens), "
            f"{len(run.taught)} facts, batch {run.corpus.n}, {s['steps']} steps, seed {int(s['seed'])}")


def batch_loss(run: ToyRun, ids, labels):
    """Mean next-token cross-entropy over the positions whose next token has a label. With `pack`
    (the default) the batch's rows share sequences (corpus.pack: each row attends only to itself and
    keeps its own positions), the same loss on about 40% fewer positions (tests/models/test_toy.py).
    Under `loss: targets` a row has a few labels (the IO name, the repeated half, the answer: about
    one position in six), so the vocabulary projection runs on those alone: about 28% less time per
    step than projecting every position, and the same loss to float rounding."""
    inputs = {"input_ids": ids}
    if run.s["pack"]:
        packed = pack(ids, labels, run.tok.pad_token_id)
        inputs, labels = packed.model_inputs(), packed.labels
    y = labels[:, 1:]
    if run.s["loss"] == "targets":
        hidden = run.model.model(**inputs).last_hidden_state[:, :-1]
        keep = y != -100
        return torch.nn.functional.cross_entropy(run.model.lm_head(hidden[keep]), y[keep])
    logits = run.model(**inputs).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), y.reshape(-1),
                                             ignore_index=-100)


def _step(run: ToyRun, opt, sched, loop: Loop, step: int) -> float:
    """One optimiser step on batch `step`; its loss."""
    loss = batch_loss(run, *run.corpus.batch(step))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), loop.clip)
    opt.step()
    sched.step()
    value = loss.item()
    if not math.isfinite(value):
        raise ToyTrainingError(f"toy training diverged at step {step + 1} (loss {value}); "
                               f"try a lower lr than {loop.lr}")
    return value


def _record(run: ToyRun, loop: Loop, rec: dict, log) -> dict:
    """`rec` (step, mean loss, seconds) with the held-out checks where due, logged."""
    done = rec["step"]
    msg = f"toy step {done}/{loop.steps} loss {rec['loss']:.3f} ({rec['seconds']:.0f} s)"
    if loop.evaluates(done):
        m = run.evaluator(run.model)
        rec.update(m)
        msg += (f" | ioi LD {m['ioi_ld']:.2f} acc {m['ioi_acc']:.2f}, icl {m['icl_loss']:.2f}, "
                f"facts {m['facts_acc']:.2f}")
    log(msg)
    return rec


def fit(run: ToyRun, log) -> tuple[list[dict], float]:
    """Train `run.model` in place: (the log records, the loop's seconds)."""
    loop = Loop.of(run.s)
    opt, sched = optimizer(run.model, run.s)
    history, run_loss, run_n = [], 0.0, 0
    t0 = time.perf_counter()
    run.model.train()
    for step in range(loop.steps):
        run_loss += _step(run, opt, sched, loop, step)
        run_n += 1
        if loop.logs(step + 1):
            rec = {"step": step + 1, "loss": run_loss / max(run_n, 1), "seconds": time.perf_counter() - t0}
            history.append(_record(run, loop, rec, log))
            run_loss, run_n = 0.0, 0
    return history, time.perf_counter() - t0


def _save(run: ToyRun, out_dir: Path, result: dict, history: list[dict]) -> None:
    with writing(out_dir), atomic_dir(out_dir) as tmp:
        run.model.config.use_cache = True
        run.model.save_pretrained(tmp, safe_serialization=True)
        run.tok.save_pretrained(tmp)
        write_json({"facts": [{k: r[k] for k in ("subject", "relation", "domain", "answer", "natural")}
                              for r in run.taught.iter_rows(named=True)]}, tmp / "toy_facts.json")
        write_json({**result, "history": history}, tmp / "toy_checks.json")


def train(s: dict, out_dir: Path, log) -> dict:
    """Train the resolved recipe `s`, judge it on the held-out sets, and write it to `out_dir`
    (atomically; nothing when it fails an enforced gate)."""
    run = prepare(s)
    log(describe(run))
    history, train_seconds = fit(run, log)
    run.model.eval()
    v = verdict(run.evaluator(run.model), s["acceptance"])
    log("toy checks (held-out): " + v.summary + f" -> {v.word}")
    steps = int(s["steps"])
    result = {"checks": v.checks, "train_seconds": round(train_seconds, 2), "steps": steps, "recipe": dict(s),
              "n_params": run.n_params, "vocab_size": len(run.tok), "n_facts_taught": int(len(run.taught))}
    if not v.passed and s["acceptance"].get("enforce", True):
        raise ToyTrainingError(
            f"toy model (seed {int(s['seed'])}, n_kv_heads {s['n_kv_heads']}, {steps} steps) failed its held-out "
            "checks: " + v.summary + ". Nothing was written to " + str(out_dir) + ". Try more "
            "steps (e.g. +50%), another seed, or a mix with more rows of the failing task; "
            "set acceptance.enforce: false to keep a failing model anyway.")
    _save(run, out_dir, result, history)
    return result
