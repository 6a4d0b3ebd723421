"""Tiny models and tokenizers for tests, built from configs (no hub access)."""

import torch

WORDS = ("the a to and went gave store garden drink book then when , . mary john tom anna paul "
         "kate lisa bako tilu remo sanu velo kira dumo pexa lomi fano").split()


def word_tokenizer(extra=()):
    """A small word-level tokenizer, so tiny test models load like any Hugging Face model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>"] + list(dict.fromkeys(
        [w.capitalize() if w in ("mary", "john", "tom", "anna", "paul", "kate", "lisa") else w for w in WORDS]
        + list(extra))))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def tiny_model(kind: str, vocab_size: int, seed: int = 0):
    from transformers import (
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    if kind == "neox":
        cfg = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=128, rotary_pct=0.25)
        return GPTNeoXForCausalLM(cfg).eval()
    kv = {"qwen_gqa": 2, "qwen_mha": 4}[kind]
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=kv, max_position_embeddings=128)
    return Qwen2ForCausalLM(cfg).eval()


def card_for(path, name="tiny", source="hf", **fields):
    """The card of the model directory `path`, `fields` (dtype, engine, ...) changed."""
    import dataclasses

    from circuitloc.models.card import make_card
    from circuitloc.models.load import load_hf

    _, tok = load_hf(str(path))
    return dataclasses.replace(make_card(name, {"source": source, "hf": str(path)}, str(path), tok), **fields)


def random_prompts(vocab, n=5, seed=0):
    """Prompts of mixed lengths over token ids >= 4 (no specials), with two answer ids a and b."""
    from circuitloc.prompts import Prompts

    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(4, 9, (n,), generator=g)
    ids = torch.randint(4, vocab, (n, int(lens.max())), generator=g)
    return Prompts(ids, lens - 1, {"a": torch.randint(4, vocab, (n,), generator=g),
                                   "b": torch.randint(4, vocab, (n,), generator=g)})


def ld(logits, f):
    """logit(a) - logit(b) per prompt, in float32 whatever the model's dtype."""
    rows = torch.arange(logits.shape[0])
    return logits[rows, f["a"]].float() - logits[rows, f["b"]].float()


def ioi_shaped(n: int, n_templates: int, seed: int):
    """n IOI-shaped rows of random token ids (6 tokens, io_id, s_id) in n_templates aligned groups:
    enough for score and curve jobs on a tiny model without the IOI generator's filters."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    return pl.DataFrame({"input_ids": [rng.integers(3, 20, 6).tolist() for _ in range(n)],
                         "io_id": rng.integers(3, 20, n).tolist(), "s_id": rng.integers(3, 20, n).tolist(),
                         "template": [i % n_templates for i in range(n)]},
                        schema={"input_ids": pl.List(pl.Int64), "io_id": pl.Int64, "s_id": pl.Int64,
                                "template": pl.Int64})


def model_card(**fields):
    """A model card for tests that need a few of its fields (the rest: a small GQA model's); the
    typed record every stage reads (circuitloc.modelcard.ModelCard)."""
    from circuitloc.modelcard import ModelCard

    base = {"name": "m", "source": "hf", "family": "f", "attention": "gqa", "n_layers": 2, "n_heads": 4,
            "n_kv_heads": 2, "d_model": 16, "d_head": 4, "n_params": 1, "dtype": "float32",
            "tokenizer": "PreTrainedTokenizerFast", "prepend_bos": False, "path": "m", "facts_form": "natural",
            "architecture": "Qwen2ForCausalLM"}
    return ModelCard(**{**base, **fields})


FACT_ROWS = [  # domain, subject, relation, answer, natural prompt (the qa form is derived)
    ("people", "Mary", "friend_of", "John", "Mary went to the store with"),
    ("people", "Tom", "friend_of", "Anna", "Tom gave a book to"),
    ("people", "Paul", "friend_of", "Kate", "Paul went to the garden with"),
    ("places", "drink", "sold_at", "store", "a drink is sold at the"),
    ("places", "book", "read_in", "garden", "a book is read in the"),
    ("people", "Lisa", "friend_of", "Mary", "Lisa gave a drink to"),
]


def write_facts(path, rows):
    """A facts file (the columns of circuitloc.tasks.facts) of `rows`, the qa prompt made from each natural one."""
    from circuitloc.tasks import facts

    lines = ["\t".join(facts.COLUMNS)] + ["\t".join([*r, f"Q: {r[4]}?\\nA:"]) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def round_trips(path):
    """A card file read, written elsewhere and compared byte for byte; the written card reads back
    equal. Returns the card."""
    from circuitloc.modelcard import ModelCard

    card = ModelCard.read(path)
    again = path.with_name(path.name + ".again")
    card.write(again)
    assert again.read_bytes() == path.read_bytes(), path
    assert ModelCard.read(again) == card
    again.unlink()
    return card


def zeroed_qwen2(**fields):
    """A Qwen2 causal LM with every weight zero and every RMSNorm's weight one (`fields`: its
    Qwen2Config), for models whose few nonzero weights a test sets by hand, so their output is
    computable by hand."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(Qwen2Config(intermediate_size=8, tie_word_embeddings=False, **fields)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        for mod in m.modules():
            if type(mod).__name__.endswith("RMSNorm"):
                mod.weight.fill_(1.0)
    return m
