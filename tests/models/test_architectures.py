"""The fast engine on the architectures it claims beyond the first six (layout.VERIFIED), each proven
on a tiny random model of that architecture's transformers config, in float32 and bfloat16: the
self-check passes, and ablating heads (one at a time, several at once, a whole kv group) gives the
logits of a plain Hugging Face forward with those heads' slice of the output projection's weight
zeroed (or, for a kv group, the shared value head's output zeroed). The reference never goes
through the engine's hooks, module search or resume.

Then the generic path (scan.BridgeScanner, TransformerLens' hook_z): forced on architectures both
engines support it gives the fast engine's numbers through the same calls; chosen by itself for one
the fast engine does not know (GPT-Neo), it equals the same weight-zeroing reference; and an
architecture neither supports (CTRL) is a one-line error naming what is supported."""

import contextlib
import dataclasses
import operator

import pytest
import torch
from helpers import card_for, ld, random_prompts, word_tokenizer
from torch import nn

from circuitloc.engine.layout import VERIFIED
from circuitloc.engine.scan import Scanner
from circuitloc.engine.selfcheck import tolerance
from circuitloc.errors import UnsupportedArchitectureError
from circuitloc.models.load import load_hf

# kind -> (config class, model class, config overrides, where the decoder layers are, where a
# layer's attention output projection is): the table is the test's own, not the engine's.
SIZE = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "max_position_embeddings": 64}
ARCHS = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64},
             "transformer.h", "attn.c_proj"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64,
                                               "rotary_dim": 4}, "transformer.h", "attn.out_proj"),
    "opt": ("OPTConfig", "OPTForCausalLM", {**SIZE, "ffn_dim": 64, "word_embed_proj_dim": 32},
            "model.decoder.layers", "self_attn.out_proj"),
    # OPT-350m's layout: post-LN and embeddings projected in and out of a narrower width
    "opt_postln": ("OPTConfig", "OPTForCausalLM", {**SIZE, "ffn_dim": 64, "word_embed_proj_dim": 16,
                                                   "do_layer_norm_before": False},
                   "model.decoder.layers", "self_attn.out_proj"),
    "phi": ("PhiConfig", "PhiForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 4,
                                            "partial_rotary_factor": 0.5}, "model.layers", "self_attn.dense"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 2,
                                               "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
             "model.layers", "self_attn.o_proj"),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 2,
                                                        "head_dim": 8, "sliding_window": 4},
                "model.layers", "self_attn.o_proj"),
    # Falcon-7B's layout: multi-query (one shared key/value head), parallel attention and MLP. Its
    # layers return tuples and its loop takes item 0: five layers, so that a skipped layer which
    # returned a bare tensor would be indexed down to a scalar before the resumed one (and fail)
    "falcon": ("FalconConfig", "FalconForCausalLM", {**SIZE, "num_hidden_layers": 5, "multi_query": True,
                                                     "new_decoder_architecture": False, "parallel_attn": True,
                                                     "bias": False, "alibi": False},
               "transformer.h", "self_attention.dense"),
    # Falcon-40B's layout: grouped kv heads, q/k/v interleaved per group, two input norms
    "falcon_gqa": ("FalconConfig", "FalconForCausalLM", {**SIZE, "new_decoder_architecture": True, "num_kv_heads": 2,
                                                         "bias": False, "alibi": False},
                   "transformer.h", "self_attention.dense"),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 4,
                                               "pad_token_id": 0}, "model.layers", "self_attn.o_proj"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 4,
                                                  "pad_token_id": 0}, "model.layers", "self_attn.o_proj"),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 4,
                                                           "partial_rotary_factor": 0.25},
                 "model.layers", "self_attn.o_proj"),
    # Qwen3: per-head q/k norms and a head width (16) that is not hidden_size / heads (8)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**SIZE, "intermediate_size": 64, "num_key_value_heads": 2,
                                                  "head_dim": 16}, "model.layers", "self_attn.o_proj"),
}
# Architectures TransformerLens supports and the fast engine does not know (GPT-Neo keeps its output
# projection at attn.attention.out_proj), and one neither supports (CTRL)
OTHERS = {
    "gptneo": ("GPTNeoConfig", "GPTNeoForCausalLM", {"num_layers": 2, "num_heads": 4, "hidden_size": 32,
                                                     "max_position_embeddings": 64, "window_size": 4,
                                                     "attention_types": [[["global", "local"], 1]]},
               "transformer.h", "attn.attention.out_proj"),
    "ctrl": ("CTRLConfig", "CTRLLMHeadModel", {"n_layer": 2, "n_head": 4, "n_embd": 32, "dff": 64, "n_positions": 64},
             "transformer.h", "multi_head_attention.dense"),
}
TABLE = {**ARCHS, **OTHERS}

# kind -> (kv heads, where a layer computes its values, the value columns of kv group g given
# d_head dh, query heads h and kv heads kv in that module's output)
VALUE_HEAD = {
    "mistral": (2, "self_attn.v_proj", lambda g, dh, h, kv: slice(g * dh, (g + 1) * dh)),
    "qwen3": (2, "self_attn.v_proj", lambda g, dh, h, kv: slice(g * dh, (g + 1) * dh)),
    # [q (h heads) | k (kv) | v (kv)]
    "phi3": (2, "self_attn.qkv_proj", lambda g, dh, h, kv: slice((h + kv + g) * dh, (h + kv + g + 1) * dh)),
    # multi-query: [q (h heads) | k | v]
    "falcon": (1, "self_attention.query_key_value", lambda g, dh, h, kv: slice((h + 1) * dh, (h + 2) * dh)),
    # per group: [q (h / kv heads) | k | v]
    "falcon_gqa": (2, "self_attention.query_key_value",
                   lambda g, dh, h, kv: slice(((g + 1) * (h // kv + 2) - 1) * dh, (g + 1) * (h // kv + 2) * dh)),
}


def spread(model: nn.Module, seed: int) -> nn.Module:
    """Weights drawn wide enough that every head visibly moves the logits (the default init's
    0.02 would leave ablation effects near the float32 tolerance); norms' gains around 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                is_norm = "norm" in type(module).__name__.lower()
                value = torch.randn(p.shape, generator=g)
                p.copy_(1 + 0.3 * value if is_norm and name == "weight" else (0.1 if p.dim() == 1 else 0.2) * value)
    return model


def build(kind: str, path, seed: int = 0):
    import transformers

    cfg_cls, model_cls, extra = TABLE[kind][:3]
    tok = word_tokenizer()
    cfg = getattr(transformers, cfg_cls)(vocab_size=len(tok), **extra)
    torch.manual_seed(seed)
    spread(getattr(transformers, model_cls)(cfg).eval(), seed).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def arch_dir(tmp_path_factory):
    """The tiny model of a kind, saved once per module in Hugging Face layout."""
    root, made = tmp_path_factory.mktemp("archs"), {}

    def get(kind):
        if kind not in made:
            made[kind] = build(kind, root / kind)
        return made[kind]
    return get


def _layers(model, kind):
    return operator.attrgetter(TABLE[kind][3])(model)


@contextlib.contextmanager
def heads_zeroed(model, kind, ablation: dict, d_head: int):
    """The ablated heads' slice of each layer's output projection weight set to zero, restored on
    the way out. nn.Linear keeps weight [out, in], so a head is a block of columns; GPT-2's Conv1D
    keeps [in, out], so it is a block of rows."""
    from transformers.pytorch_utils import Conv1D

    saved = []
    try:
        for layer, heads in ablation.items():
            proj = operator.attrgetter(TABLE[kind][4])(_layers(model, kind)[layer])
            w = proj.weight
            saved.append((w, w.detach().clone()))
            with torch.no_grad():
                for h in heads:
                    cols = slice(h * d_head, (h + 1) * d_head)
                    if isinstance(proj, Conv1D):
                        w[cols, :] = 0
                    else:
                        w[:, cols] = 0
        yield
    finally:
        with torch.no_grad():
            for w, orig in saved:
                w.copy_(orig)


@contextlib.contextmanager
def value_head_zeroed(model, kind, layer: int, group: int, card):
    """kv group `group`'s value head output zeroed (bias included) in `layer`, by a forward hook on
    the module that computes it: every query head of the group then outputs z = 0."""
    n_kv, path, cols = VALUE_HEAD[kind]
    mod = operator.attrgetter(path)(_layers(model, kind)[layer])
    sl = cols(group, card.d_head, card.n_heads, n_kv)

    def zero(m, args, out):
        out = out.clone()
        out[..., sl] = 0
        return out

    handle = mod.register_forward_hook(zero)
    try:
        yield
    finally:
        handle.remove()


def last_logits(model, p):
    with torch.no_grad():
        return model(input_ids=p.input_ids, use_cache=False).logits[torch.arange(len(p)), p.last_pos].float()


def logit_a(logits, f):
    return logits[torch.arange(logits.shape[0]), f["a"]].float()


def setup(arch_dir, kind, dtype, budget=16):
    path = arch_dir(kind)
    card = card_for(path, dtype=dtype)
    model, tok = load_hf(str(path), dtype)
    return card, model, Scanner(model, card.n_heads, card.d_head, max_batch_tokens=budget), \
        random_prompts(len(tok), n=5, seed=1)


def check_cases(sc, model, p, cases, dtype):
    """The engine's metric under each ablation set against a plain forward under its reference
    (`cases`: (set, a context manager that ablates the set in the plain model by other means)):
    logits within tolerance(dtype), drops (ablated - clean) within twice that. Returns the
    reference values [1 + sets, prompts] (clean first) and the tolerance."""
    got = sc.run(p, [{}] + [s for s, _ in cases], {"logit": logit_a})["logit"]
    clean = last_logits(model, p)
    want = [logit_a(clean, p.fields)]
    for _, reference in cases:
        with reference:
            want.append(logit_a(last_logits(model, p), p.fields))
    want = torch.stack(want)
    tol = tolerance(getattr(torch, dtype), float(clean.abs().max()))
    assert (got - want).abs().max() <= tol
    assert ((got[1:] - got[0]) - (want[1:] - want[0])).abs().max() <= 2 * tol
    return want, tol


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", sorted(ARCHS))
def test_engine_ablation_equals_zeroing_the_heads_weight_slice(arch_dir, kind, dtype):
    """Each head alone, two heads of a layer, heads across layers and a whole layer; the
    self-check (which raises on a mismatch) passes first, as in every job."""
    card, model, sc, p = setup(arch_dir, kind, dtype)
    assert card.architecture in VERIFIED
    sc.self_check(p)
    H, L = card.n_heads, card.n_layers
    sets = [{layer: [h]} for layer in range(L) for h in range(H)]
    sets += [{0: [0, 2]}, {0: [1], L - 1: [3]}, {L - 1: list(range(H))}]
    want, tol = check_cases(sc, model, p, [(s, heads_zeroed(model, kind, s, card.d_head)) for s in sets], dtype)
    if dtype == "float32":  # every head matters here, far above the tolerance: the check has teeth
        assert (want[1 : 1 + L * H] - want[0]).abs().amax(dim=1).min() > 100 * tol


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", sorted(VALUE_HEAD))
def test_kv_group_ablation_equals_zeroing_the_shared_value_head(arch_dir, kind, dtype):
    """GQA (Mistral, Qwen3, Phi-3 and Falcon-40B's layout with two kv heads) and Falcon-7B's
    multi-query attention: ablating the query heads that share a value head = zeroing that value
    head's output."""
    card, model, sc, p = setup(arch_dir, kind, dtype)
    n_kv, per = VALUE_HEAD[kind][0], card.n_heads // VALUE_HEAD[kind][0]
    cases = [({layer: list(range(g * per, (g + 1) * per))}, value_head_zeroed(model, kind, layer, g, card))
             for layer in range(card.n_layers) for g in range(n_kv)]
    want, tol = check_cases(sc, model, p, cases, dtype)
    if dtype == "float32":
        assert (want[1:] - want[0]).abs().amax(dim=1).min() > 100 * tol


@pytest.mark.parametrize("kind", ["mistral", "qwen3", "phi3"])
def test_card_counts_the_kv_heads_of_gqa_architectures(arch_dir, kind):
    assert card_for(arch_dir(kind)).n_kv_heads == VALUE_HEAD[kind][0]


@pytest.mark.parametrize("kind", ["falcon", "falcon_gqa"])
def test_card_counts_falcons_kv_heads(arch_dir, kind):
    assert card_for(arch_dir(kind)).n_kv_heads == VALUE_HEAD[kind][0]


# -- the generic path: TransformerLens' bridge, chosen where the fast engine does not know the model --
def bridged(arch_dir, kind, dtype, engine="auto", budget=16):
    """(card, plain model, the scanner `scanner_for` picks, prompts)."""
    from circuitloc.engine.select import scanner_for

    path = arch_dir(kind)
    card = card_for(path, dtype=dtype)
    model, tok = load_hf(str(path), dtype)
    return card, model, scanner_for(card, (model, tok), budget, engine=engine), random_prompts(len(tok), n=5, seed=1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["gpt2", "qwen3"])
def test_forced_bridge_engine_equals_the_fast_engine(arch_dir, kind, dtype):
    """On architectures both engines support: the same self-check, zero and mean ablation of
    single heads and of sets, mean replacement and attribution through the same calls (the
    callers' interface), the same numbers within tolerance(dtype)."""
    from circuitloc.engine.attribution import attribute
    from circuitloc.engine.bridge import BridgeScanner
    from circuitloc.engine.replacement import mean_replacement

    card, model, slow, p = bridged(arch_dir, kind, dtype, engine="bridge")
    fast = Scanner(model, card.n_heads, card.d_head, max_batch_tokens=16)
    assert isinstance(slow, BridgeScanner) and (slow.engine, fast.engine) == ("bridge", "scan")
    slow.self_check(p)
    rows = [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)]
    sets = [{}] + rows + [{0: [0, 2], 1: [3]}]
    tol = tolerance(getattr(torch, dtype), float(last_logits(model, p).abs().max()))
    got = {"zero": (slow.run(p, sets, {"logit": logit_a})["logit"], fast.run(p, sets, {"logit": logit_a})["logit"])}
    slow.replacement, fast.replacement = mean_replacement(slow, p), mean_replacement(fast, p)
    for layer, r in fast.replacement.items():
        assert (slow.replacement[layer] - r).abs().max() <= tol
    got["mean"] = (slow.run(p, sets, {"logit": logit_a})["logit"], fast.run(p, sets, {"logit": logit_a})["logit"])
    for kind_, (a, b) in got.items():
        assert (a - b).abs().max() <= tol, kind_
        assert (a[1:] - a[0]).abs().max() > 10 * tol, kind_  # the heads matter: the comparison has teeth
    if dtype == "float32":
        assert torch.allclose(attribute(slow, p, ld), attribute(fast, p, ld), atol=10 * tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bridge_is_chosen_for_an_architecture_the_fast_engine_does_not_know(arch_dir, dtype):
    """GPT-Neo (TransformerLens supports it; its output projection is at a path the fast engine
    does not look for): `scanner_for` picks the bridge, whose ablations equal zeroing the heads'
    weight slice in a plain forward."""
    card, model, sc, p = bridged(arch_dir, "gptneo", dtype)
    assert card.architecture not in VERIFIED and sc.engine == "bridge"
    with pytest.raises(UnsupportedArchitectureError, match="GPTNeoBlock"):
        Scanner(model, card.n_heads, card.d_head)
    sc.self_check(p)
    sets = [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)] + [{0: [1, 3], 1: [0]}]
    cases = [(s, heads_zeroed(model, "gptneo", s, card.d_head)) for s in sets]
    want, tol = check_cases(sc, model, p, cases, dtype)
    if dtype == "float32":
        assert (want[1:] - want[0]).abs().amax(dim=1).min() > 100 * tol


def test_fast_engine_is_chosen_for_a_verified_architecture(arch_dir):
    assert bridged(arch_dir, "gpt2", "float32")[2].engine == "scan"


@pytest.mark.parametrize("kind, word", [("gpt2", "scan"), ("gptneo", "bridge"), ("ctrl", "scan-unverified")])
def test_the_card_names_the_engine_its_jobs_scan_with(arch_dir, kind, word):
    """The card's `engine` is what `scanner_for` then picks from it: a card's word, not a guess."""
    from circuitloc.engine.select import engine_of, scanner_for

    card = card_for(arch_dir(kind))
    assert engine_of(card.architecture) == word
    if kind != "ctrl":
        model, tok = load_hf(str(arch_dir(kind)), "float32")
        assert scanner_for(dataclasses.replace(card, engine=word), (model, tok), 16, engine=word).engine == word
    else:  # the fast engine refuses CTRL: the card's word still gets the one-line refusal
        model, tok = load_hf(str(arch_dir(kind)), "float32")
        with pytest.raises(UnsupportedArchitectureError, match="supported neither"):
            scanner_for(dataclasses.replace(card, engine=word), (model, tok), 16, engine=word)


def test_an_architecture_neither_engine_supports_is_one_line_naming_what_is_supported(arch_dir):
    from circuitloc.engine.select import bridge_architectures

    for engine in ("auto", "bridge"):
        with pytest.raises(UnsupportedArchitectureError) as e:
            bridged(arch_dir, "ctrl", "float32", engine=engine)
        msg = str(e.value)
        assert "\n" not in msg and "CTRLLMHeadModel is supported neither" in msg
        assert all(a in msg for a in VERIFIED) and all(a in msg for a in bridge_architectures())
    assert "CTRLLMHeadModel" not in bridge_architectures()


def test_choose_engine():
    from circuitloc.engine.select import bridge_architectures, choose_engine

    assert {choose_engine(a) for a in VERIFIED} == {"scan"}
    assert choose_engine("GPTNeoForCausalLM") == choose_engine("BloomForCausalLM") == "bridge"
    assert choose_engine("SomeNewForCausalLM") == "scan"  # neither knows it: the self-check decides
    assert choose_engine("GPT2LMHeadModel", "bridge") == "bridge"
    assert choose_engine("GPTNeoForCausalLM", "scan") == "scan"
    assert "GPTNeoForCausalLM" in bridge_architectures()
    with pytest.raises(ValueError, match="engine 'fast'.*auto, scan, bridge"):
        choose_engine("GPT2LMHeadModel", "fast")


def test_job_records_which_engine_ran_and_callers_do_not_change(arch_dir):
    """AblationJob with mean ablation (replacement through the engine's z hooks), on the fast
    engine and on the bridge forced by the card: the same scores through the same calls, and the
    job and its label say which engine ran; GPT-Neo goes to the bridge by itself."""
    from helpers import ioi_shaped

    from circuitloc.engine.ablation import as_sets
    from circuitloc.engine.job import AblationJob
    from circuitloc.engine.settings import JobSettings
    from circuitloc.tasks.common import mark_scoring

    data = mark_scoring(ioi_shaped(12, 2, seed=2), 6)
    card = card_for(arch_dir("gpt2"))
    jobs = [AblationJob(JobSettings(card=c, batch_tokens=64, task="ioi", min_group=2, seed=0), data, "mean-query")
            for c in (card, dataclasses.replace(card, engine="bridge"))]
    assert [j.engine for j in jobs] == ["scan", "bridge"]
    assert "engine scan" in jobs[0].scanner.label and "engine bridge" in jobs[1].scanner.label
    assert jobs[1].bridge is jobs[1].scanner.bridge
    sets = [{}] + [as_sets([u]) for u in jobs[0].units]
    fast, slow = (j.scanner.run(j.prompts, sets, {"m": j.task.metric})["m"] for j in jobs)
    assert (fast - slow).abs().max() <= 1e-4 and (fast[1:] - fast[0]).abs().max() > 1e-2
    neo = AblationJob(JobSettings(card=card_for(arch_dir("gptneo")), batch_tokens=64, task="ioi"), data, "zero-query")
    assert neo.engine == "bridge" and "GPTNeoForCausalLM, float32, engine bridge" in neo.scanner.label


def test_bridge_self_check_catches_a_broken_path(arch_dir, monkeypatch):
    """A bridge engine whose forward is off, or whose head layout is not the card's, is refused by
    its self-check before it scores anything."""
    from circuitloc.engine.bridge import BridgeScanner
    from circuitloc.errors import EngineMismatchError

    card, model, sc, p = bridged(arch_dir, "gptneo", "float32")
    sc.self_check(p)
    wrong = BridgeScanner(sc.bridge, card.n_heads, card.d_head * 2, reference=model)  # a card's wrong head_dim
    with pytest.raises(UnsupportedArchitectureError, match=r"hook_z carries \(\d+, \d+, 32\), not .* 64\]"):
        wrong.self_check(p)
    orig = BridgeScanner._forward_from
    monkeypatch.setattr(BridgeScanner, "_forward_from", lambda self, *a: orig(self, *a) * 1.001)
    with pytest.raises(EngineMismatchError, match="the bridge engine's logits with every hook_z hooked differ"):
        sc.self_check(p)
