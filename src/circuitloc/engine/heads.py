"""Attention-pattern head scores, read from TransformerLens' blocks.{l}.attn.hook_pattern."""

from __future__ import annotations

import torch


def _patterns(bridge, input_ids: torch.Tensor, n_layers: int) -> list[torch.Tensor]:
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(n_layers)]
    with torch.no_grad():
        _, cache = bridge.run_with_cache(input_ids, names_filter=lambda n: n in names)
    return [cache[n].float().cpu() for n in names]  # each [N, H, T, T]


def induction_scores(bridge, input_ids, last_pos, b_pos, n_layers: int) -> torch.Tensor:
    """[L, H]: mean attention from the final A to B, the token after A's first occurrence."""
    rows = torch.arange(len(b_pos))
    return torch.stack([p[rows, :, last_pos, b_pos].mean(0) for p in _patterns(bridge, input_ids, n_layers)])


def previous_token_scores(bridge, input_ids, last_pos, n_layers: int) -> torch.Tensor:
    """[L, H]: mean attention from each real position t >= 1 to t - 1."""
    out = []
    T = input_ids.shape[1]
    t = torch.arange(1, T)
    mask = (t[None, :] <= last_pos[:, None]).float()  # [N, T-1]
    for p in _patterns(bridge, input_ids, n_layers):
        prev = p[:, :, t, t - 1]  # [N, H, T-1]
        out.append((prev * mask[:, None]).sum((0, 2)) / mask.sum())
    return torch.stack(out)
