"""Fused attention (sdpa) for the fast engine: on a tiny random model of every verified architecture
(layout.VERIFIED), the engine over the model loaded with attn_implementation 'sdpa' gives the
scores of the engine over the same weights with 'eager', within the self-check's tolerance, in
float32 and bfloat16; and the loader picks sdpa only where the engine is the fast one on a GPU."""

import dataclasses

import pytest
import torch
from arch_helpers import save_tiny_arch
from helpers import card_for, model_card, random_prompts, tiny_model, word_tokenizer
from test_architectures import build

from circuitloc.engine.layout import VERIFIED
from circuitloc.engine.scan import Scanner
from circuitloc.engine.selfcheck import tolerance
from circuitloc.models.load import attention_for, load_hf

KINDS = ["gpt2", "gptj", "opt", "opt_postln", "phi", "phi3", "mistral", "falcon", "falcon_gqa", "olmo", "olmo2",
         "stablelm", "qwen3", "llama", "gemma", "gemma2", "gemma3", "neox", "qwen_gqa"]
MAX_GAP = {}  # kind -> the largest float32 gap seen (printed with -s; reported in the issue)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root, made = tmp_path_factory.mktemp("sdpa"), {}

    def get(kind):
        if kind not in made:
            path = root / kind
            if kind in ("llama", "gemma", "gemma2", "gemma3"):
                save_tiny_arch(kind, path)
            elif kind in ("neox", "qwen_gqa"):
                tok = word_tokenizer()
                tiny_model(kind, len(tok)).save_pretrained(path)
                tok.save_pretrained(path)
            else:
                build(kind, path)
            made[kind] = path
        return made[kind]
    return get


def logit_a(logits, f):
    return logits[torch.arange(logits.shape[0]), f["a"]].float()


def scores(path, dtype, attn, card, p):
    model, _ = load_hf(str(path), dtype, attn=attn)
    assert model.config._attn_implementation == attn
    sc = Scanner(model, card.n_heads, card.d_head, max_batch_tokens=64)
    sets = [{}] + [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)]
    sets.append({card.n_layers - 1: list(range(card.n_heads))})
    return sc.run(p, sets, {"logit": logit_a})["logit"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_sdpa_engine_equals_eager_engine(tiny_dir, kind, dtype):
    path = tiny_dir(kind)
    card = card_for(path, dtype=dtype)
    if attention_for(dataclasses.replace(card, engine="scan"), "cuda") == "eager":
        assert kind == "gemma2"  # transformers has no sdpa path for it (attention soft-cap): eager on GPUs too
        return
    p = random_prompts(len(word_tokenizer()), n=5, seed=2)
    eager = scores(path, dtype, "eager", card, p)
    sdpa = scores(path, dtype, "sdpa", card, p)
    tol = tolerance(getattr(torch, dtype), float(eager.abs().max()))
    gap = float((sdpa - eager).abs().max())
    if dtype == "float32":
        MAX_GAP[kind] = gap
        print(f"{kind}: sdpa - eager, float32, max |gap| {gap:.3g} (tolerance {tol:.3g})")
    assert gap <= tol
    assert float(((sdpa[1:] - sdpa[0]) - (eager[1:] - eager[0])).abs().max()) <= 2 * tol


def test_every_verified_architecture_is_covered(tiny_dir):
    """A new VERIFIED architecture needs its sdpa case here."""
    covered = {card_for(tiny_dir(k)).architecture for k in KINDS}
    assert covered == set(VERIFIED)


def test_sdpa_only_for_the_fast_engine_on_a_gpu():
    """CPU runs stay eager (the default run's float32 numbers are eager's, bit for bit); the bridge
    and an unverified architecture's engine stay eager on a GPU too."""
    card = model_card()
    assert attention_for(dataclasses.replace(card, engine="scan"), "cuda") == "sdpa"
    assert attention_for(dataclasses.replace(card, engine="scan"), "cpu") == "eager"
    assert attention_for(dataclasses.replace(card, engine="scan", architecture="Gemma2ForCausalLM"), "cuda") == "eager"
    for engine in ("bridge", "scan-unverified", "auto"):
        assert attention_for(dataclasses.replace(card, engine=engine), "cuda") == "eager"


def test_the_bridge_over_an_sdpa_model_runs_eager_on_the_same_weights(tiny_dir):
    """A job on a GPU loads the fast engine's model with sdpa; a bridge built over it (the
    specificity and attribution paths) runs eager attention (TransformerLens sets its twin's config
    to eager) and gives the same numbers, the original model untouched."""
    from circuitloc.engine.bridge import BridgeScanner
    from circuitloc.models.load import bridge_over

    path = tiny_dir("llama")
    card = card_for(path)
    model, tok = load_hf(str(path), attn="sdpa")
    bridge = bridge_over(card, model, tok)
    assert model.config._attn_implementation == "sdpa"
    assert bridge.original_model.config._attn_implementation == "eager"
    p = random_prompts(len(word_tokenizer()), n=5, seed=2)
    sets = [{}] + [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)]
    want = Scanner(model, card.n_heads, card.d_head, 64).run(p, sets, {"logit": logit_a})["logit"]
    got = BridgeScanner(bridge, card.n_heads, card.d_head, 64, reference=model).run(p, sets, {"logit": logit_a})["logit"]
    assert float((got - want).abs().max()) <= tolerance(torch.float32, float(want.abs().max()))
