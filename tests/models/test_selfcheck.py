"""The engine checks itself: it equals the naive TransformerLens loop on every architecture it
claims (float32 and bfloat16, within selfcheck.tolerance), and its self-check catches a broken engine."""

import contextlib

import pytest
import torch
from arch_helpers import save_tiny_arch
from helpers import card_for, ld
from helpers import random_prompts as _prompts

from circuitloc.engine.ablation import as_sets, units
from circuitloc.engine.bridge import naive_run
from circuitloc.engine.layout import VERIFIED
from circuitloc.engine.replacement import mean_replacement
from circuitloc.engine.scan import Scanner
from circuitloc.engine.selfcheck import tolerance
from circuitloc.errors import (
    EngineMismatchError,
    NonFiniteError,
    UnsupportedArchitectureError,
)
from circuitloc.models.load import engine_model, load


@pytest.fixture(scope="module")
def arch_dirs(tmp_path_factory, tiny_dirs):
    root = tmp_path_factory.mktemp("arch")
    out = {"neox": tiny_dirs["neox"], "qwen2": tiny_dirs["qwen_gqa"]}
    for kind in ("llama", "gemma", "gemma2", "gemma3"):
        out[kind] = save_tiny_arch(kind, root / kind)
    return out


def _setup(path, dtype="float32", budget=100000):
    card = card_for(path, dtype=dtype)
    bridge, tok = load(card)
    sc = Scanner(engine_model(bridge), card.n_heads, card.d_head, max_batch_tokens=budget)
    return card, bridge, sc, _prompts(len(tok))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["neox", "qwen2", "llama", "gemma", "gemma2", "gemma3"])
def test_engine_equals_naive_loop_per_architecture_and_dtype(arch_dirs, kind, dtype):
    """Zero and mean ablation, single heads and a set, a batch budget that splits the work: the
    metric agrees within twice the logit tolerance (a difference of two logits)."""
    card, bridge, sc, p = _setup(arch_dirs[kind], dtype, budget=7)
    assert card.architecture in VERIFIED
    errors = sc.self_check(p)
    rows = units(card)
    sets = [{}] + [as_sets([u]) for u in rows] + [as_sets(rows[:3])]
    fast_zero = sc.run(p, sets, {"ld": ld})["ld"]
    slow_zero = naive_run(bridge, p, sets, ld)
    sc.replacement = repl = mean_replacement(sc, p)
    fast_mean = sc.run(p, sets, {"ld": ld})["ld"]
    slow_mean = naive_run(bridge, p, sets, ld, replacement=repl)
    with torch.no_grad():
        scale = float(engine_model(bridge)(p.input_ids).logits.abs().max())
    tol = tolerance(getattr(torch, dtype), scale)
    assert max(errors.values()) <= tol
    assert (fast_zero - slow_zero).abs().max() <= 2 * tol
    assert (fast_mean - slow_mean).abs().max() <= 2 * tol
    assert (slow_zero[1:] - slow_zero[0]).abs().max() > 0  # the ablations change something


def test_gemma2_soft_cap_is_applied(arch_dirs):
    """The engine's logits are soft-capped as the model's own (|logit| <= cap): a head that skipped
    the cap would differ from the naive loop, and the self-check would say so."""
    card, bridge, sc, p = _setup(arch_dirs["gemma2"])
    cap = engine_model(bridge).config.final_logit_softcapping
    logits = sc.last_logits(p)
    assert logits.abs().max() <= cap
    with torch.no_grad():
        raw = engine_model(bridge).get_output_embeddings()(
            engine_model(bridge).model(p.input_ids).last_hidden_state)
    assert raw.abs().max() > cap  # the cap changes something here


def _uncapped_body(self, embeds, last_pos):
    """The engine before it used the model's own head: no soft-cap."""
    hidden = self.base(inputs_embeds=embeds, use_cache=False).last_hidden_state
    return self.unembed(hidden[torch.arange(hidden.shape[0]), last_pos])


@contextlib.contextmanager
def _off_by_one(self, start, resid):
    """A broken resume: the cached input of layer `start` enters layer start + 1."""
    nxt = min(start + 1, len(self.layers) - 1)

    def feed(mod, args, kwargs):
        return ((resid,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": resid})

    h = self.layers[nxt].register_forward_pre_hook(feed, with_kwargs=True)
    try:
        with self._skipping(nxt):
            yield
    finally:
        h.remove()


@pytest.mark.parametrize("kind, broken", [("gemma2", "uncapped_head"), ("qwen2", "off_by_one"),
                                          ("neox", "off_by_one")])
def test_self_check_catches_a_broken_engine(arch_dirs, monkeypatch, kind, broken):
    card, bridge, sc, p = _setup(arch_dirs[kind])
    sc.self_check(p)  # the real engine passes
    if broken == "uncapped_head":
        monkeypatch.setattr(Scanner, "logits_from_embeddings", _uncapped_body)
    else:
        monkeypatch.setattr(Scanner, "_resumed", _off_by_one)
    with pytest.raises(EngineMismatchError) as e:
        sc.self_check(p)
    msg = str(e.value)
    assert card.architecture in msg and "differ from a plain forward" in msg and "by " in msg
    assert "float32" in msg


def test_self_check_in_bfloat16_uses_the_bfloat16_tolerance(arch_dirs, monkeypatch):
    """A resume that is off by a relative 1e-3 passes in bfloat16 (below its tolerance) and fails
    in float32: the same check, a dtype-aware tolerance."""
    orig = Scanner.resumed_logits

    def nudged(self, resid, start, last_pos):
        out = orig(self, resid, start, last_pos)
        return out + 1e-3 * out.abs().max()

    monkeypatch.setattr(Scanner, "resumed_logits", nudged)
    _, _, sc16, p = _setup(arch_dirs["qwen2"], "bfloat16")
    sc16.self_check(p)
    _, _, sc32, p = _setup(arch_dirs["qwen2"], "float32")
    with pytest.raises(EngineMismatchError, match="float32"):
        sc32.self_check(p)


def test_non_finite_logits_stop_the_self_check(arch_dirs, monkeypatch):
    _, bridge, sc, p = _setup(arch_dirs["qwen2"])
    sc.label = "model tiny (Qwen2ForCausalLM, float32), task ioi"
    h = engine_model(bridge).get_output_embeddings().register_forward_hook(lambda m, a, out: out * float("nan"))
    try:
        with pytest.raises(NonFiniteError, match="model tiny .*NaN.*clean run.*float32"):
            sc.self_check(p)
    finally:
        h.remove()


def test_an_architecture_without_a_known_output_projection_is_refused_by_name(arch_dirs):
    _, bridge, _, _ = _setup(arch_dirs["qwen2"])
    model = engine_model(bridge)
    for layer in model.model.layers:
        layer.self_attn.renamed_proj = layer.self_attn.o_proj
        del layer.self_attn.o_proj
    with pytest.raises(UnsupportedArchitectureError, match="Qwen2DecoderLayer.*not supported"):
        Scanner(model, 4, 16)
