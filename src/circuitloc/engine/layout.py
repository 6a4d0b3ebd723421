"""Where a decoder keeps what the engine touches: its layers, each layer's attention output
projection (whose input is the head outputs z), z's layout, and the one way hooks are installed.
The engine reads and ablates the projection's input, so the projection weight's layout (GPT-2's
Conv1D stores it [in, out]) does not matter to it."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from circuitloc.errors import UnsupportedArchitectureError

# Where a base model keeps its decoder layers (OPT: inside its decoder), and where a decoder layer
# keeps its attention output projection: GPT-2's Conv1D `attn.c_proj` (weight stored [in, out]),
# GPT-J's `attn.out_proj`, OPT's `self_attn.out_proj`, Phi 1.5/2's `self_attn.dense`, Falcon's
# `self_attention.dense`, GPT-NeoX's `attention.dense`, `o_proj` elsewhere. The engine reads and
# ablates the projection's input, so the weight's layout does not matter to it.
LAYER_PATHS = ("layers", "h", "decoder.layers")
OUT_PROJ_PATHS = ("self_attn.o_proj", "attention.dense", "attn.o_proj", "self_attention.dense", "self_attn.dense",
                  "self_attn.out_proj", "attn.out_proj", "attn.c_proj")


class Skip(nn.Module):
    """Stands in for a layer whose output is already in the cached residual, returned in the form
    the layer returns it (Falcon's layers return a tuple whose first item is the residual)."""

    def __init__(self, as_tuple: bool = False):
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states, *args, **kwargs):
        return (hidden_states,) if self.as_tuple else hidden_states


def find(module: nn.Module, paths) -> nn.Module | None:
    """The first of the dotted `paths` that exists below `module`, or None."""
    for path in paths:
        mod = module
        try:
            for part in path.split("."):
                mod = getattr(mod, part)
            return mod
        except AttributeError:
            continue
    return None


@contextlib.contextmanager
def hooked(hooks, with_kwargs: bool = False):
    """The engine's one way to install forward pre-hooks, `hooks` being (module, fn) pairs: all of
    them are removed on the way out, even when the forward or a later registration raises, since a
    hook left behind would silently ablate every later run of the same model."""
    handles = []
    try:
        for module, fn in hooks:
            handles.append(module.register_forward_pre_hook(fn, with_kwargs=with_kwargs))
        yield
    finally:
        for handle in reversed(handles):
            handle.remove()


def out_proj(layer: nn.Module) -> nn.Module:
    """A decoder layer's attention output projection: its input is the layer's head outputs z,
    [B, T, H * Dh] (see `split_heads`), the one place where the engine ablates and reads heads."""
    mod = find(layer, OUT_PROJ_PATHS)
    if mod is None:
        raise UnsupportedArchitectureError(f"no attention output projection found in {type(layer).__name__}: "
                                           "this architecture is not supported by the scan engine")
    return mod


def decoder_layers(base: nn.Module) -> nn.ModuleList:
    """The base model's decoder layers, in order (`LAYER_PATHS`)."""
    layers = find(base, LAYER_PATHS)
    if not isinstance(layers, nn.ModuleList):
        raise UnsupportedArchitectureError(f"no decoder layers found in {type(base).__name__}: "
                                           "this architecture is not supported by the scan engine")
    return layers


def input_device(model: nn.Module) -> torch.device:
    """Where `model` reads its input ids: its input embedding's execution device. Spread over devices
    by accelerate (`device_map: auto`), an offloaded module's weights wait on the meta device and
    its hook moves them in for each forward, so a weight's device is not where it runs."""
    emb = model.get_input_embeddings()
    dev = getattr(getattr(emb, "_hf_hook", None), "execution_device", None)
    return torch.device(dev) if dev is not None else emb.weight.device


def split_heads(x: torch.Tensor, n_heads: int, d_head: int) -> torch.Tensor:
    """The output projection's input [..., H * Dh] as head outputs [..., H, Dh] (a view): heads are
    consecutive slices of width d_head in every supported architecture."""
    return x.view(*x.shape[:-1], n_heads, d_head)


def merge_heads(z: torch.Tensor) -> torch.Tensor:
    """Head outputs [..., H, Dh] back into the output projection's input [..., H * Dh]."""
    return z.reshape(*z.shape[:-2], -1)


# Architectures whose engine numbers are tested, in float32 and bfloat16, equal to the naive
# TransformerLens loop (tests/models/test_scan.py, tests/models/test_selfcheck.py) or to a plain forward with the
# ablated heads' slice of the output projection's weight zeroed (tests/models/test_architectures.py).
# `engine.select.scanner_for` sends others to the TransformerLens bridge where it supports them, else
# runs them here only if the self-check passes, with a warning.
VERIFIED = ("GPTNeoXForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "GemmaForCausalLM",
            "Gemma2ForCausalLM", "Gemma3ForCausalLM", "GPT2LMHeadModel", "GPTJForCausalLM", "OPTForCausalLM",
            "PhiForCausalLM", "Phi3ForCausalLM", "MistralForCausalLM", "FalconForCausalLM", "OlmoForCausalLM",
            "Olmo2ForCausalLM", "StableLmForCausalLM", "Qwen3ForCausalLM")

