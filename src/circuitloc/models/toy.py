"""The `toy` model source: a small Qwen2 model trained from scratch, on one CPU thread, on a
synthetic corpus of the three tasks (IOI sentences, repeated random-token sequences, fact
statements), then checked on held-out prompts before it is accepted.

    result = train_toy(spec, out_dir, log=print)

`spec` is the model's config block (see DEFAULTS for every key and its default). The MHA/GQA
controlled pair is two specs that differ only in `n_kv_heads`: same vocabulary, data stream,
seed, steps and, for every parameter of the same shape, the same initial weights.

Training: AdamW (betas 0.9/0.98), gradient clip 1.0, linear warmup then constant lr. The loss
is next-token cross-entropy on every real (non-padding) token of every row (`loss: all`); with
`loss: targets` it is restricted to the IO name of IOI rows, the repeated half of induction rows
and the answer of fact rows.

Acceptance (held-out): IOI sentences from another generator seed (none identical to a training
sentence), induction sequences from `tasks.induction.sequences` with an evaluation seed, and the
taught facts in natural form. Thresholds are strict: ioi_ld > t, ioi_acc > t, icl_loss < t,
facts_acc > t. A failing model with `enforce: true` raises ToyTrainingError and writes nothing.

Output directory (written atomically): model.safetensors + config.json (fp32, tied embeddings),
tokenizer.json + tokenizer_config.json (word level; load with circuitloc.models.load.load_tokenizer —
AutoTokenizer would pick Qwen2's BPE class from config.json), toy_facts.json
(the taught facts), toy_checks.json (checks, recipe, timing, training log).
"""

from __future__ import annotations

import copy
import math
import random
import time
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import torch

from circuitloc.errors import ToyTrainingError
from circuitloc.io import atomic_dir, write_json
from circuitloc.plan.checkpoints import CHECKPOINT_FILES, checkpoint_files
from circuitloc.tasks import facts as facts_task
from circuitloc.tasks import induction as induction_task
from circuitloc.tasks import ioi as ioi_task
from circuitloc.tasks.common import pad_right

SPECIALS = ["<bos>", "<eos>", "<pad>", "<unk>"]

DEFAULTS: dict = {
    # architecture (Qwen2, tied embeddings)
    "n_layers": 2,
    "d_model": 128,
    "n_heads": 8,
    "n_kv_heads": 8,
    "d_mlp": None,  # None -> 4 * d_model
    "rope_theta": 10000.0,
    "max_len": 128,
    # optimisation
    "seed": 0,
    "steps": 1600,
    "batch": 64,
    "lr": 1e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "betas": [0.9, 0.98],
    "clip": 1.0,
    "loss": "all",  # "all" tokens, or "targets" only
    "threads": 1,
    # data
    "mix": {"ioi": 18, "induction": 36, "facts": 10},  # relative weights per batch
    "repeat_len": [6, 20],  # induction rows: <bos> x1..xk x1..xk, k in this range
    "pool_size": 300,  # pseudo-words added to the vocabulary
    "n_facts": 165,
    "facts_path": None,  # None -> resources/facts/facts.tsv
    "ioi_resources": None,  # None -> resources/ioi
    # logging / evaluation
    "log_every": 100,
    "eval_every": 0,  # >0: run the held-out checks every this many steps (logged only)
    "eval": {"n_ioi": 200, "n_induction": 200, "prefix_len": [4, 8], "suffix_len": [10, 16], "seed": 12345},
    "acceptance": {"ioi_ld": 2.0, "ioi_acc": 0.9, "icl_loss": 0.5, "facts_acc": 0.9, "enforce": True},
}


def resolve_spec(spec: dict | None) -> dict:
    """DEFAULTS overlaid with `spec` (nested dicts merged one level deep)."""
    out = copy.deepcopy(DEFAULTS)
    for k, v in (spec or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    if out["d_mlp"] is None:
        out["d_mlp"] = 4 * int(out["d_model"])
    if int(out["d_model"]) % int(out["n_heads"]) or int(out["n_heads"]) % int(out["n_kv_heads"]):
        raise ToyTrainingError(
            f"toy spec: d_model ({out['d_model']}) must be divisible by n_heads ({out['n_heads']}) "
            f"and n_heads by n_kv_heads ({out['n_kv_heads']})")
    if out["loss"] not in ("all", "targets"):
        raise ToyTrainingError(f"toy spec: loss must be 'all' or 'targets', got {out['loss']!r}")
    return out


# --------------------------------------------------------------------------- vocabulary

def _pre_tokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Whitespace()  # \w+ | [^\w\s]+ : words and punctuation


def _words(text: str) -> list[str]:
    return [w for w, _ in _pre_tokenizer().pre_tokenize_str(text)]


def pseudo_words(n: int, seed: int, exclude=()) -> list[str]:
    """`n` distinct pronounceable lowercase pseudo-words of 3-10 letters, deterministic in seed."""
    rng = random.Random(f"toy-pool-{seed}")
    onsets = list("bdfgklmnprstvz") + ["br", "dr", "gl", "kr", "pl", "st", "tr", "sh", "ch"]
    vowels = list("aeiou") + ["ai", "ou", "ea"]
    codas = ["", "", "", "n", "r", "l", "s", "m", "k"]
    taken = {w.lower() for w in exclude}
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) + rng.choice(codas)
        if 3 <= len(w) <= 10 and w.isalpha() and w not in taken:
            taken.add(w)
            out.append(w)
    return out


def select_facts(facts_df: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """The taught facts: eligible ones (one-word answer, natural prompt not shared with a
    different answer), in a seeded shuffle, first `n`."""
    df = facts_df.with_columns(pl.Series("natural", [t.strip() for t in facts_df["natural"]], dtype=pl.String),
                               pl.Series("answer", [t.strip() for t in facts_df["answer"]], dtype=pl.String))
    one_word = pl.Series([len(_words(a)) == 1 for a in df["answer"]], dtype=pl.Boolean)
    ok = one_word & (df.select(pl.col("answer").n_unique().over("natural"))["answer"] == 1) \
        & (df["natural"].str.len_chars() > 0)
    df = df.filter(ok).unique(subset="natural", keep="first", maintain_order=True)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0xFAC75])).permutation(len(df))
    return df[order[:n]]


def build_tokenizer(ioi_res: dict, taught: pl.DataFrame, pool_size: int, seed: int):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words: list[str] = []
    for key in ("templates", "names", "places", "objects"):
        for line in ioi_res[key]:
            words += _words(line.replace("{", " ").replace("}", " ") if key == "templates" else line)
    for text in list(taught["natural"]) + list(taught["answer"]):
        words += _words(text)
    placeholders = {"IO", "S", "PLACE", "OBJECT"}
    base = sorted(set(words) - placeholders - set(SPECIALS))
    pool = pseudo_words(pool_size, seed, exclude=base)
    vocab = {w: i for i, w in enumerate(SPECIALS + base + pool)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = _pre_tokenizer()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>",
                                  pad_token="<pad>", unk_token="<unk>")
    return tok, pool


# --------------------------------------------------------------------------- model

def build_model(s: dict, vocab_size: int, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=int(s["d_model"]), intermediate_size=int(s["d_mlp"]),
        num_hidden_layers=int(s["n_layers"]), num_attention_heads=int(s["n_heads"]),
        num_key_value_heads=int(s["n_kv_heads"]), max_position_embeddings=int(s["max_len"]),
        rope_theta=float(s["rope_theta"]), tie_word_embeddings=True, use_cache=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        initializer_range=0.02,
    )
    model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa")
    model.tie_weights()
    # Our own initialisation, one generator per parameter seeded by (seed, name): every parameter
    # that the MHA and GQA models share gets the same initial values.
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(int(s["seed"]) * 1_000_003 + zlib.crc32(name.encode()))
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * cfg.initializer_range)
    return model.float()


# --------------------------------------------------------------------------- data

def _counts(mix: dict, batch: int) -> dict:
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


# --------------------------------------------------------------------------- evaluation

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
    rows = [("ioi_ld", ">"), ("ioi_acc", ">"), ("icl_loss", "<"), ("facts_acc", ">")]
    ok, lines = True, []
    for k, op in rows:
        t = float(acc[k])
        good = m[k] > t if op == ">" else m[k] < t
        ok &= good
        lines.append(f"{k} = {m[k]:.3f} (needs {op} {t}){'' if good else '  FAILED'}")
    return ok, lines


# --------------------------------------------------------------------------- training

def optimizer(model, s: dict):
    """AdamW with weight decay on matrices only, and a linear warm-up to a constant rate (cosine
    decay stalled induction). Returns (optimizer, scheduler)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(s["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(s["lr"]), betas=tuple(s["betas"]), eps=1e-8)
    warm = max(int(s["warmup"]), 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warm) if warm else 1.0)
    return opt, sched


def train_toy(spec: dict, out_dir, log=print) -> dict:
    if spec.get("checkpoint"):
        return from_checkpoint(spec, out_dir, log)
    s = resolve_spec(spec)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(int(s["threads"]))
    try:
        with torch.random.fork_rng(devices=[]):
            return _train(s, Path(out_dir), log)
    finally:
        torch.set_num_threads(old_threads)


def _train(s: dict, out_dir: Path, log) -> dict:
    seed = int(s["seed"])
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

    ioi_res = ioi_task.load_resources(s["ioi_resources"])
    all_facts = facts_task.load(s["facts_path"])
    taught = select_facts(all_facts, int(s["n_facts"]), seed)
    tok, pool = build_tokenizer(ioi_res, taught, int(s["pool_size"]), seed)
    cand = induction_task.candidate_tokens(tok)
    model = build_model(s, len(tok), tok)
    n_params = sum(p.numel() for p in model.parameters())
    corpus = Corpus(s, tok, ioi_res, taught, cand)
    evaluator = Evaluator(s, tok, ioi_res, taught, corpus.ioi_text)
    log(f"toy: {s['n_layers']}L d{s['d_model']} {s['n_heads']}q/{s['n_kv_heads']}kv heads, "
        f"{n_params / 1e6:.2f}M params, vocab {len(tok)} ({len(cand)} induction tokens), "
        f"{len(taught)} facts, batch {corpus.n}, {s['steps']} steps, seed {seed}")

    opt, sched = optimizer(model, s)

    history, run_loss, run_n = [], 0.0, 0
    t0 = time.perf_counter()
    model.train()
    steps = int(s["steps"])
    for step in range(steps):
        ids, labels = corpus.batch(step)
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(s["clip"]))
        opt.step()
        sched.step()
        if not math.isfinite(loss.item()):
            raise ToyTrainingError(f"toy training diverged at step {step + 1} (loss {loss.item()}); "
                                   f"try a lower lr than {s['lr']}")
        run_loss += loss.item()
        run_n += 1
        done = step + 1
        every = int(s["log_every"] or 0)
        ev = int(s["eval_every"] or 0)
        if (every and done % every == 0) or done == steps or (ev and done % ev == 0):
            rec = {"step": done, "loss": run_loss / max(run_n, 1), "seconds": time.perf_counter() - t0}
            msg = f"toy step {done}/{steps} loss {rec['loss']:.3f} ({rec['seconds']:.0f} s)"
            if ev and done % ev == 0 and done != steps:
                m = evaluator(model)
                rec.update(m)
                msg += (f" | ioi LD {m['ioi_ld']:.2f} acc {m['ioi_acc']:.2f}, icl {m['icl_loss']:.2f}, "
                        f"facts {m['facts_acc']:.2f}")
            log(msg)
            history.append(rec)
            run_loss, run_n = 0.0, 0
    train_seconds = time.perf_counter() - t0

    model.eval()
    m = evaluator(model)
    acc = s["acceptance"]
    thresholds = {k: float(acc[k]) for k in ("ioi_ld", "ioi_acc", "icl_loss", "facts_acc")}
    passed, lines = judge(m, acc)
    checks = {**m, "passed": bool(passed), "thresholds": thresholds}
    recipe = {k: v for k, v in s.items()}
    log("toy checks (held-out): " + "; ".join(lines) + f" -> {'PASSED' if passed else 'FAILED'}")
    result = {"checks": checks, "train_seconds": round(train_seconds, 2), "steps": steps, "recipe": recipe,
              "n_params": int(n_params), "vocab_size": len(tok), "n_facts_taught": int(len(taught))}

    if not passed and acc.get("enforce", True):
        raise ToyTrainingError(
            f"toy model (seed {seed}, n_kv_heads {s['n_kv_heads']}, {steps} steps) failed its held-out "
            "checks: " + "; ".join(lines) + ". Nothing was written to " + str(out_dir) + ". Try more "
            "steps (e.g. +50%), another seed, or a mix with more rows of the failing task; "
            "set acceptance.enforce: false to keep a failing model anyway.")

    with atomic_dir(out_dir) as tmp:
        model.config.use_cache = True
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        write_json({"facts": [{k: r[k] for k in ("subject", "relation", "domain", "answer", "natural")}
                              for r in taught.iter_rows(named=True)]}, tmp / "toy_facts.json")
        write_json({**result, "history": history}, tmp / "toy_checks.json")
    return result


# --------------------------------------------------------------------------- stored checkpoints

# What a checkpoint's recipe fixes: a spec that names one of these must agree with it.
CHECKPOINT_FIXED = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_mlp", "rope_theta", "max_len", "seed",
                    "steps", "batch", "lr", "warmup", "weight_decay", "betas", "clip", "loss", "mix", "repeat_len",
                    "pool_size", "n_facts", "facts_path", "ioi_resources")

def from_checkpoint(spec: dict, out_dir, log=print) -> dict:
    """A toy trained earlier (a directory that train_toy wrote) instead of training one now: copied,
    then checked on held-out prompts on this machine. Training over many steps drifts apart across
    CPUs (float summation order); stored weights give every machine the same model to score."""
    import json
    import shutil

    from transformers import Qwen2ForCausalLM

    from circuitloc.models.load import load_tokenizer

    ck = Path(spec["checkpoint"])
    missing = [f for f in checkpoint_files(ck) if not Path(f).is_file()]
    if missing:
        raise ToyTrainingError(f"toy checkpoint {ck}: missing {', '.join(Path(f).name for f in missing)} "
                               "(expected a directory written by the toy source)")
    try:
        stored = json.loads((ck / "toy_checks.json").read_text())
        recipe = stored["recipe"]
        taught = pl.DataFrame(json.loads((ck / "toy_facts.json").read_text())["facts"])
    except (ValueError, KeyError, TypeError) as e:
        raise ToyTrainingError(f"toy checkpoint {ck}: toy_checks.json or toy_facts.json unreadable "
                               f"({type(e).__name__}: {e})") from e
    for k in CHECKPOINT_FIXED:
        if k in spec and spec[k] != recipe.get(k):
            raise ToyTrainingError(f"toy checkpoint {ck}: toy.{k} = {spec[k]!r} but the checkpoint was "
                                   f"trained with {recipe.get(k)!r}; drop toy.{k} or use another checkpoint")
    s = resolve_spec({**{k: recipe[k] for k in CHECKPOINT_FIXED if k in recipe},
                      **{k: v for k, v in spec.items() if k != "checkpoint"}})
    ioi_res = ioi_task.load_resources(s["ioi_resources"])
    tok = load_tokenizer(str(ck))
    model = Qwen2ForCausalLM.from_pretrained(ck, dtype=torch.float32).eval()
    evaluator = Evaluator(s, tok, ioi_res, taught, set(training_ioi(s, ioi_res)["prompt"]))
    m = evaluator(model)
    passed, lines = judge(m, s["acceptance"])
    log(f"toy checkpoint {ck} checks (held-out, this machine): " + "; ".join(lines)
        + f" -> {'PASSED' if passed else 'FAILED'}")
    if not passed and s["acceptance"].get("enforce", True):
        raise ToyTrainingError(f"toy checkpoint {ck} failed its held-out checks: " + "; ".join(lines)
                               + ". Nothing was written to " + str(out_dir) + ".")
    thresholds = {k: float(s["acceptance"][k]) for k in ("ioi_ld", "ioi_acc", "icl_loss", "facts_acc")}
    with atomic_dir(out_dir) as tmp:
        for f in CHECKPOINT_FILES:
            shutil.copy2(ck / f, tmp / f)
    return {"checks": {**m, "passed": bool(passed), "thresholds": thresholds},
            "train_seconds": stored.get("train_seconds"), "steps": int(s["steps"]), "recipe": s,
            "checkpoint": str(ck)}
