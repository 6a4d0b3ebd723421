"""The generic exact path through TransformerLens 4's bridge, for an architecture the fast
engine (engine.scan) does not know, and the naive reference loop the engine is tested against."""

from __future__ import annotations

import torch
from torch import nn

from circuitloc.engine.layout import hooked
from circuitloc.engine.scan import Ablation, Metric, Scanner
from circuitloc.errors import UnsupportedArchitectureError
from circuitloc.prompts import Prompts


class BridgeScanner(Scanner):
    """The generic exact path, for an architecture TransformerLens 4 supports and the fast engine
    does not know: heads are ablated where the bridge's own vocabulary puts their outputs,
    `blocks.{l}.attn.hook_z` (the input of the attention output projection, [B, T, H * Dh]), and
    every stacked batch of ablation sets runs the whole forward (no resume: the bridge's layers are
    not the engine's to skip). Slower than `Scanner`, the same numbers and the same interface
    (`run`, `self_check`, `last_logits`, `z_hooks`, `logits_from_embeddings`, `replacement`).

    `bridge`: a TransformerBridge (`models.load.bridge_over`); `reference`: the plain Hugging Face
    model over the same weights, which the self-check compares with (default: the bridged model)."""

    engine = "bridge"

    def __init__(self, bridge, n_heads: int, d_head: int, max_batch_tokens: int = 4096,
                 reference: nn.Module | None = None):
        self.bridge = bridge
        self.model = bridge.original_model  # the Hugging Face model with the bridge's components in place
        self.base = self.model.base_model
        self.unembed = self.model.get_output_embeddings()
        self.layers = bridge.blocks
        self.n_heads, self.d_head = n_heads, d_head
        self.max_batch_tokens = max_batch_tokens
        self.replacement = {}
        self.prefix_reuse = False
        self.forward_passes = 0.0
        self.label = type(self.model).__name__
        self._plain = reference
        missing = [i for i in range(len(self.layers)) if f"blocks.{i}.attn.hook_z" not in bridge.hook_dict]
        if missing:
            raise UnsupportedArchitectureError(f"{self.label}: the TransformerLens bridge has no blocks.{missing[0]}"
                                               ".attn.hook_z: this architecture is not supported by the bridge engine")

    def _z_site(self, layer: int) -> nn.Module:
        return self.bridge.hook_dict[f"blocks.{layer}.attn.hook_z"]

    @property
    def reference(self) -> nn.Module:
        return self._plain if self._plain is not None else self.model

    def _starts(self, sub: Prompts, share: float) -> list[torch.Tensor]:
        """The bucket's token embeddings: every forward starts from them."""
        return [self.model.get_input_embeddings()(sub.input_ids.to(self.unembed.weight.device))]

    def _forward_from(self, starts: list[torch.Tensor], start: int, copies: int, last: torch.Tensor) -> torch.Tensor:
        return self.logits_from_embeddings(starts[0].repeat(copies, 1, 1), last)

    def resumed_logits(self, resid: torch.Tensor, start: int, last_pos: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("the bridge engine runs whole forwards (logits_from_embeddings); it does not resume")

    def _checked_logits(self, sub: Prompts) -> dict[str, torch.Tensor]:
        """The clean logits through the bridge, bare and with every layer's hook_z hooked (no head
        ablated: the hooks must change nothing), after checking that hook_z carries [B, T, H * Dh]."""
        dev = self.unembed.weight.device
        shapes = {}
        with hooked(self.z_hooks(lambda i, x: shapes.setdefault(i, tuple(x.shape)))):
            clean = self.last_logits(sub)
        width = self.n_heads * self.d_head
        bad = [i for i in range(len(self.layers)) if len(shapes.get(i, ())) != 3 or shapes[i][-1] != width]
        if bad:
            raise UnsupportedArchitectureError(
                f"{self.label}: the bridge's blocks.{bad[0]}.attn.hook_z carries {shapes.get(bad[0], 'nothing')}, "
                f"not head outputs [batch, positions, {width}] (heads x d_head): not supported by the bridge engine")
        keep = {layer: torch.ones(1, self.n_heads) for layer in range(len(self.layers))}
        starts = self._starts(sub, 0.0)
        with self._ablating(keep, 1, torch.arange(len(sub))):
            hooked_logits = self._forward_from(starts, 0, 1, sub.last_pos.to(dev)).float()
        return {"last-position logits": clean, "logits with every hook_z hooked": hooked_logits}


def naive_run(bridge, prompts: Prompts, ablations: list[Ablation], metric: Metric,
              replacement: dict | None = None) -> torch.Tensor:
    """The reference: one full TransformerLens forward per ablation set, hooks on hook_z."""
    replacement = replacement or {}
    results = []
    ids = prompts.input_ids
    rows = torch.arange(ids.shape[0])
    with torch.no_grad():
        for s in ablations:
            hooks = []
            for layer, heads in s.items():
                def fn(z, hook, heads=list(heads), layer=layer):
                    z = z.clone()
                    r = replacement.get(layer)
                    z[:, :, heads] = 0 if r is None else (r[:, : z.shape[1]] if r.dim() == 4 else r).to(z.dtype)[..., heads, :]
                    return z
                hooks.append((f"blocks.{layer}.attn.hook_z", fn))
            logits = bridge.run_with_hooks(ids, fwd_hooks=hooks)
            results.append(metric(logits[rows, prompts.last_pos], prompts.fields).float())
    return torch.stack(results)
