"""Attribution patching: a first-order estimate of every head's ablation effect from one forward
and one backward pass. Only for pre-ranking (e.g. a greedy curve's candidate pool); exact
scores stay the default everywhere."""

from __future__ import annotations

import torch

from circuitloc.engine.layout import hooked
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts


def attribute(scanner: Scanner, prompts: Prompts, metric, replacement: dict | None = None) -> torch.Tensor:
    """[n_layers, n_heads] estimated change of the mean metric when each head's z is replaced
    (zero by default): grad(metric) . (z_replaced - z), summed over real positions."""
    replacement = replacement or {}
    zs: dict[int, torch.Tensor] = {}

    def keep(i, z):
        z.retain_grad()
        zs[i] = z

    dev = scanner.unembed.weight.device
    with hooked(scanner.z_hooks(keep)), torch.enable_grad():
        embeds = scanner.model.get_input_embeddings()(prompts.input_ids.to(dev)).detach().requires_grad_(True)
        logits = scanner.logits_from_embeddings(embeds, prompts.last_pos.to(dev))
        fields = {k: v.to(dev) for k, v in prompts.fields.items()}
        metric(logits, fields).float().mean().backward()
    mask = (torch.arange(prompts.input_ids.shape[1], device=dev)[None] <= prompts.last_pos.to(dev)[:, None])
    out = torch.zeros(len(scanner.layers), scanner.n_heads)
    for i, z in zs.items():
        t = z.shape[1]
        zh, gh = scanner.heads(z.detach()), scanner.heads(z.grad)
        repl = replacement.get(i)
        target = torch.zeros_like(zh) if repl is None else repl.to(zh).expand_as(zh)
        delta = ((target - zh) * gh).sum(-1) * mask[:, :t, None]
        out[i] = delta.sum(dim=(0, 1)).cpu()
    return out
