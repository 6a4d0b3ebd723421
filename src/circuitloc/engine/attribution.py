"""Attribution patching: a first-order estimate of every head's ablation effect from one forward
and one backward pass (or a few, with integrated gradients). It only proposes (a guided greedy
step's candidates, `engine.greedy`); the exact engine decides and reports every number.

The estimate of replacing head h's output z_h by its replacement r_h (zero, mean or resample, the
scanner's `replacement`) is grad(metric) . (r_h - z_h), summed over positions; a unit (a KV group,
a layer) is estimated as the sum of its query heads' estimates. With `ablated` (a greedy's chosen
units) those heads output their replacement during the pass, so the estimate is of adding a unit to
that set. Integrated gradients (`steps` > 1) average the gradient over points between the clean and
the replaced z of every head at once (alpha = 0, 1/steps, ...), which is exact for a metric
quadratic in z and closer than one gradient where the metric bends.

Only the head outputs' gradient is computed (`torch.autograd.grad` on them, the weights `frozen`
for the pass): no parameter gets a `.grad`, the forward keeps no activation that only a weight's
gradient needs, and the backward costs about one forward (torch's FLOP counter: a forward and its
backward to the activations are 2.0 forward passes, with every weight's gradient 3.0;
tests/models/test_attribution_memory.py). The estimates are bit for bit those of a backward
through unfrozen weights."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from circuitloc.engine.ablation import as_sets
from circuitloc.engine.layout import hooked
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts


@contextlib.contextmanager
def frozen(model: torch.nn.Module):
    """The model's weights without requires_grad for the duration (put back after, even on an
    error): a backward then computes no weight gradient and the forward saves no activation for
    one, only what the gradients of the head outputs need."""
    thawed = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in thawed:
            p.requires_grad_(False)
        yield
    finally:
        for p in thawed:
            p.requires_grad_(True)


def _target(replacement: dict, layer: int, rows: torch.Tensor, zh: torch.Tensor) -> torch.Tensor:
    """What layer's heads output when replaced, shaped as zh [b, t, H, Dh] (zero where none)."""
    repl = replacement.get(layer)
    if repl is None:
        return torch.zeros_like(zh)
    r = repl[rows.to(repl.device), : zh.shape[1]] if repl.dim() == 4 else repl
    return r.to(zh).expand_as(zh)


def attribute(scanner: Scanner, prompts: Prompts, metric, replacement: dict | None = None,
              ablated: dict | None = None, steps: int = 1) -> torch.Tensor:
    """[n_layers, n_heads] estimated change of the mean metric when each head's z is replaced by
    `replacement` (layer -> tensor as `Scanner.replacement`, 4-D ones indexed by the rows of
    `prompts`; zero where absent or None), with the heads of `ablated` ({layer: [heads]}, the
    engine's ablation set) replaced throughout. `steps`: 1 is the linear estimate, more is
    integrated gradients over that many points. Runs one length bucket at a time, as the engine."""
    if steps < 1:
        raise ValueError(f"attribution steps must be at least 1, got {steps}")
    replacement, ablated = replacement or {}, ablated or {}
    n_layers, n = len(scanner.layers), len(prompts)
    out = torch.zeros(n_layers, scanner.n_heads, dtype=torch.float64)
    dev = scanner.unembed.weight.device
    for rows in prompts.buckets(scanner.max_batch_tokens):
        sub = prompts.take(rows)
        base: dict[int, torch.Tensor] = {}  # r - z at alpha 0 (the clean z with `ablated` in place)
        grads: dict[int, torch.Tensor] = {}
        for k in range(steps):
            alpha = k / steps
            zs: dict[int, torch.Tensor] = {}

            def move(i, x, alpha=alpha, zs=zs):
                zh = scanner.heads(x)
                w = torch.full((scanner.n_heads,), alpha, dtype=zh.dtype, device=zh.device)
                w[list(ablated.get(i, ()))] = 1.0
                tgt = _target(replacement, i, rows, zh)
                if alpha == 0:
                    base[i] = (tgt - zh).detach().float()
                    base[i][..., list(ablated.get(i, ())), :] = 0.0  # already replaced: nothing left to change
                z = zh + w[:, None] * (tgt - zh)
                zs[i] = z
                return z.reshape(x.shape)

            with hooked(scanner.z_hooks(move)), frozen(scanner.model), torch.enable_grad():
                embeds = scanner.model.get_input_embeddings()(sub.input_ids.to(dev)).detach().requires_grad_(True)
                logits = scanner.logits_from_embeddings(embeds, sub.last_pos.to(dev))
                fields = {key: v.to(dev) for key, v in sub.fields.items()}
                layers = sorted(zs)  # the gradient of the head outputs alone: no weight's, no embedding's
                dz = torch.autograd.grad(metric(logits, fields).float().sum() / n, [zs[i] for i in layers],
                                         allow_unused=True)
            for i, g in zip(layers, dz):
                g = g.float() if g is not None else torch.zeros_like(zs[i], dtype=torch.float32)
                grads[i] = grads.get(i, 0) + g / steps
        for i, d in base.items():
            out[i] += (d * grads[i]).sum(dim=(0, 1, 3)).double().cpu()
    scanner.forward_passes += 2 * steps  # a forward, and a backward to the activations only: one more (FLOPs counted)
    return out.float()


def unit_estimates(att: torch.Tensor, unit_rows) -> np.ndarray:
    """Each unit's estimated change of the metric: the sum of its query heads' (`attribute`)."""
    return np.asarray([float(att[u.layer, list(u.heads)].sum()) for u in unit_rows])


def estimated_drops(probe, unit_rows, chosen=(), steps: int = 1) -> np.ndarray:
    """Each unit's estimated drop (`metrics.drop`: positive hurts) when added to `chosen`, on the
    probe's prompts, with its scanner's replacement (the ablation's kind)."""
    task = probe.task
    att = attribute(probe.scanner, probe.prompts, task.metric, probe.scanner.replacement,
                    ablated=as_sets(list(chosen)), steps=steps)
    change = unit_estimates(att, unit_rows)
    return -change if task.higher_is_better else change
