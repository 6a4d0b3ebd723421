"""The toy's word-level tokenizer: one token per word or punctuation run of the IOI resources and
the taught facts, plus seeded pseudo-words for the induction rows. Saved with the model; load it
with circuitloc.models.load.load_tokenizer (AutoTokenizer would pick Qwen2's BPE class from
config.json)."""

from __future__ import annotations

import random

import polars as pl
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<bos>", "<eos>", "<pad>", "<unk>"]


def _pre_tokenizer():
    return pre_tokenizers.Whitespace()  # \w+ | [^\w\s]+ : words and punctuation


def words(text: str) -> list[str]:
    """`text` split as the tokenizer splits it."""
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


def build_tokenizer(ioi_res: dict, taught: pl.DataFrame, pool_size: int, seed: int):
    """(tokenizer, pool): the specials, every word of the IOI resources and taught facts (sorted),
    then `pool_size` pseudo-words none of them spells."""
    vocab_words: list[str] = []
    for key in ("templates", "names", "places", "objects"):
        for line in ioi_res[key]:
            vocab_words += words(line.replace("{", " ").replace("}", " ") if key == "templates" else line)
    for text in list(taught["natural"]) + list(taught["answer"]):
        vocab_words += words(text)
    placeholders = {"IO", "S", "PLACE", "OBJECT"}
    base = sorted(set(vocab_words) - placeholders - set(SPECIALS))
    pool = pseudo_words(pool_size, seed, exclude=base)
    vocab = {w: i for i, w in enumerate(SPECIALS + base + pool)}
    tk = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = _pre_tokenizer()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>",
                                  pad_token="<pad>", unk_token="<unk>")
    return tok, pool
