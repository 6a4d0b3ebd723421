"""Where a decoder keeps what the engine touches: its layers, each layer's attention output
projection (whose input is the head outputs z), z's layout, and the one way hooks are installed.
The engine reads and ablates the projection's input, so the projection weight's layout (GPT-2's
Conv1D stores it [in, out]) does not matter to it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from circuitloc.errors import UnsupportedArchitectureError



@dataclass(frozen=True)
class Layout:
    """Where one architecture keeps what the engine touches: its decoder layers below the base model
    (`hf_model.base_model`, a dotted path) and a decoder layer's attention output projection."""

    layers: str
    out_proj: str


# The architectures whose engine numbers are tested, in float32 and bfloat16, equal to the naive
# TransformerLens loop (tests/models/test_scan.py, tests/models/test_selfcheck.py) or to a plain forward with the
# ablated heads' slice of the output projection's weight zeroed (tests/models/test_architectures.py), keyed by
# the model's class name: GPT-2's Conv1D `attn.c_proj` (weight stored [in, out]), GPT-J's `attn.out_proj`,
# OPT's `self_attn.out_proj` (its layers inside its decoder), Phi 1.5/2's `self_attn.dense`, Falcon's
# `self_attention.dense`, GPT-NeoX's `attention.dense`, `o_proj` elsewhere. The engine reads and ablates the
# projection's input, so the weight's layout does not matter to it. `engine.select.scanner_for` sends
# others to the TransformerLens bridge where it supports them, else runs them here (the paths below
# searched, `FALLBACK_*`) only if the self-check passes, with a warning.
_LLAMA_LIKE = Layout("layers", "self_attn.o_proj")
ARCHITECTURES: dict[str, Layout] = {
    "GPTNeoXForCausalLM": Layout("layers", "attention.dense"), "Qwen2ForCausalLM": _LLAMA_LIKE,
    "LlamaForCausalLM": _LLAMA_LIKE, "GemmaForCausalLM": _LLAMA_LIKE, "Gemma2ForCausalLM": _LLAMA_LIKE,
    "Gemma3ForCausalLM": _LLAMA_LIKE, "GPT2LMHeadModel": Layout("h", "attn.c_proj"),
    "GPTJForCausalLM": Layout("h", "attn.out_proj"), "OPTForCausalLM": Layout("decoder.layers", "self_attn.out_proj"),
    "PhiForCausalLM": Layout("layers", "self_attn.dense"), "Phi3ForCausalLM": _LLAMA_LIKE,
    "MistralForCausalLM": _LLAMA_LIKE, "FalconForCausalLM": Layout("h", "self_attention.dense"),
    "OlmoForCausalLM": _LLAMA_LIKE, "Olmo2ForCausalLM": _LLAMA_LIKE, "StableLmForCausalLM": _LLAMA_LIKE,
    "Qwen3ForCausalLM": _LLAMA_LIKE,
}
VERIFIED = tuple(ARCHITECTURES)
# An architecture not in the table: every known path is searched, and exactly one may exist (a name
# that matches two modules is an error, never the first found)
FALLBACK_LAYERS = ("layers", "h", "decoder.layers")
FALLBACK_OUT_PROJ = ("self_attn.o_proj", "attention.dense", "attn.o_proj", "self_attention.dense", "self_attn.dense",
                     "self_attn.out_proj", "attn.out_proj", "attn.c_proj")


class Skip(nn.Module):
    """Stands in for a layer whose output is already in the cached residual, returned in the form
    the layer returns it (Falcon's layers return a tuple whose first item is the residual)."""

    def __init__(self, as_tuple: bool = False):
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states, *args, **kwargs):
        return (hidden_states,) if self.as_tuple else hidden_states


def at(module: nn.Module, path: str) -> nn.Module | None:
    """The module at dotted `path` below `module`, or None."""
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def find(module: nn.Module, paths, what: str = "module") -> nn.Module | None:
    """The one module of the dotted `paths` that exists below `module`, or None; two distinct modules
    found is an UnsupportedArchitectureError naming both (which one is meant is not guessed)."""
    found = {}
    for path in paths:
        mod = at(module, path)
        if mod is not None and all(mod is not m for m in found.values()):
            found[path] = mod
    if len(found) > 1:
        raise UnsupportedArchitectureError(
            f"{type(module).__name__}: the {what} is ambiguous, {' and '.join(found)} both exist; name the "
            "architecture's paths in circuitloc.engine.layout.ARCHITECTURES")
    return next(iter(found.values()), None)


def _located(module: nn.Module, architecture: str | None, field: str, what: str) -> nn.Module | None:
    """`module`'s `what` at the table's path for `architecture` (its model class name), or by the
    fallback search (`find`) for an architecture not in the table."""
    layout = ARCHITECTURES.get(architecture or "")
    if layout is not None:
        return at(module, getattr(layout, field))
    return find(module, FALLBACK_LAYERS if field == "layers" else FALLBACK_OUT_PROJ, what)


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


def out_proj(layer: nn.Module, architecture: str | None = None) -> nn.Module:
    """A decoder layer's attention output projection: its input is the layer's head outputs z,
    [B, T, H * Dh] (see `split_heads`), the one place where the engine ablates and reads heads.
    `architecture`: the model's class name, whose entry in `ARCHITECTURES` says where it is."""
    mod = _located(layer, architecture, "out_proj", "attention output projection")
    if mod is None:
        where = f" at {ARCHITECTURES[architecture].out_proj}" if architecture in ARCHITECTURES else ""
        raise UnsupportedArchitectureError(f"no attention output projection found{where} in {type(layer).__name__}: "
                                           "this architecture is not supported by the scan engine")
    return mod


def decoder_layers(base: nn.Module, architecture: str | None = None) -> nn.ModuleList:
    """The base model's decoder layers, in order (`ARCHITECTURES`' path for `architecture`, the
    model's class name; else the one of `FALLBACK_LAYERS` that exists)."""
    layers = _located(base, architecture, "layers", "list of decoder layers")
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
