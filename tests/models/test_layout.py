"""The engine's architecture table (engine.layout.ARCHITECTURES): each listed model class is found at
its row's paths, which are the modules the earlier first-found search over every known path chose (so
no number moves); a class not listed is searched, and two distinct modules found is an error naming
both, never the first. Tiny random models built from a config (no download)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from circuitloc.engine.layout import (
    ARCHITECTURES,
    FALLBACK_LAYERS,
    FALLBACK_OUT_PROJ,
    VERIFIED,
    decoder_layers,
    out_proj,
)
from circuitloc.engine.scan import Scanner
from circuitloc.errors import UnsupportedArchitectureError

transformers = pytest.importorskip("transformers")

SIZE = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64}
# model class -> config overrides beyond SIZE (what the config class needs to build at this size)
OVERRIDES = {
    "GPT2LMHeadModel": {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64},
    "GPTJForCausalLM": {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64, "rotary_dim": 4},
    "OPTForCausalLM": {"ffn_dim": 64, "word_embed_proj_dim": 32},
    "FalconForCausalLM": {"new_decoder_architecture": True, "num_kv_heads": 2, "alibi": False},
    "GemmaForCausalLM": {"head_dim": 8}, "Gemma2ForCausalLM": {"head_dim": 8},
    "Gemma3ForCausalLM": {"head_dim": 8}, "Phi3ForCausalLM": {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
}


def _model_type(cls_name: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as names

    return next(t for t, c in names.items() if c == cls_name)


def tiny(cls_name: str) -> nn.Module:
    cfg = transformers.AutoConfig.for_model(_model_type(cls_name), **{**SIZE, **OVERRIDES.get(cls_name, {})})
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(cfg).eval()


def first_found(module: nn.Module, paths) -> nn.Module | None:
    """The search the table replaced: the first of `paths` that exists below `module`."""
    for path in paths:
        mod = module
        try:
            for part in path.split("."):
                mod = getattr(mod, part)
            return mod
        except AttributeError:
            continue
    return None


@pytest.mark.parametrize("cls_name", VERIFIED)
def test_each_listed_class_is_found_where_the_search_found_it(cls_name):
    model = tiny(cls_name)
    assert type(model).__name__ == cls_name
    layers = decoder_layers(model.base_model, cls_name)
    assert layers is first_found(model.base_model, FALLBACK_LAYERS) and len(layers) == 2
    for layer in layers:
        proj = out_proj(layer, cls_name)
        assert proj is first_found(layer, FALLBACK_OUT_PROJ)
        assert proj is layer.get_submodule(ARCHITECTURES[cls_name].out_proj)
        # the projection reads the heads' outputs: a hidden-size-wide input (GPT-2's Conv1D: weight [in, out])
        width = proj.weight.shape[0] if cls_name == "GPT2LMHeadModel" else proj.weight.shape[1]
        assert width == model.config.num_attention_heads * (getattr(model.config, "head_dim", None) or 8)


def _qwen2():
    return tiny("Qwen2ForCausalLM")


def test_a_class_not_listed_is_searched():
    """A subclass under a name of its own is not in the table: the search finds the one projection."""
    model = _qwen2()
    layer = model.base_model.layers[0]
    assert out_proj(layer, "MyQwen2ForCausalLM") is layer.self_attn.o_proj
    assert out_proj(layer) is layer.self_attn.o_proj
    assert decoder_layers(model.base_model, "MyQwen2ForCausalLM") is model.base_model.layers


def test_a_name_that_matches_two_modules_is_an_error_for_a_class_not_listed():
    model = _qwen2()
    for layer in model.base_model.layers:
        layer.attn = nn.Module()
        layer.attn.o_proj = nn.Linear(32, 32)  # a second, distinct module at another known path
    layer = model.base_model.layers[0]
    with pytest.raises(UnsupportedArchitectureError, match="ambiguous, self_attn.o_proj and attn.o_proj both exist"):
        out_proj(layer, "MyQwen2ForCausalLM")
    # the table names which one a listed class means
    assert out_proj(layer, "Qwen2ForCausalLM") is layer.self_attn.o_proj
    renamed = type("MyQwen2ForCausalLM", (type(model),), {})
    model.__class__ = renamed
    with pytest.raises(UnsupportedArchitectureError, match="Qwen2DecoderLayer: the attention output projection is"):
        Scanner(model, 4, 8)


def test_one_module_under_two_known_names_is_not_ambiguous():
    model = _qwen2()
    layer = model.base_model.layers[0]
    layer.attn = layer.self_attn  # the same module at both paths
    assert out_proj(layer, "MyQwen2ForCausalLM") is layer.self_attn.o_proj


def test_two_lists_of_layers_are_an_error_for_a_class_not_listed():
    model = _qwen2()
    base = model.base_model
    base.h = nn.ModuleList([nn.Linear(2, 2)])
    with pytest.raises(UnsupportedArchitectureError, match="Qwen2Model: the list of decoder layers is ambiguous"):
        decoder_layers(base, "MyQwen2ForCausalLM")
    assert decoder_layers(base, "Qwen2ForCausalLM") is base.layers


def test_a_listed_class_without_its_projection_is_refused_naming_the_path():
    model = _qwen2()
    layer = model.base_model.layers[0]
    del layer.self_attn.o_proj
    with pytest.raises(UnsupportedArchitectureError, match="found at self_attn.o_proj in Qwen2DecoderLayer"):
        out_proj(layer, "Qwen2ForCausalLM")
