"""A task's prompts as the engine runs them: right-padded token ids, each prompt's last real
position, and the per-prompt fields its metrics read."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Prompts:
    input_ids: torch.Tensor  # [N, T], right-padded
    last_pos: torch.Tensor  # [N]
    fields: dict = field(default_factory=dict)  # per-prompt tensors the metrics read (io_id, b_id, ...)

    def __len__(self):
        return self.input_ids.shape[0]

    def take(self, idx) -> "Prompts":
        """A subset, trimmed to its own longest prompt."""
        ids = self.input_ids[idx]
        width = int(self.last_pos[idx].max()) + 1
        return Prompts(ids[:, :width], self.last_pos[idx], {k: v[idx] for k, v in self.fields.items()})

    def buckets(self, max_tokens: int, pad: bool = False) -> list[torch.Tensor]:
        """Prompts grouped by length (no padding inside a group), each group within max_tokens. `pad`:
        prompts of different lengths share a group, padded on the right to its longest: longest
        first, each group filled until its rows times its longest length reach max_tokens. A causal
        model's real positions never attend to the padding after them and each prompt's metric
        reads its own last real position, so the numbers are those of exact-length groups (within
        float rounding: the matrix products have other shapes), in fewer, fuller passes."""
        lengths = self.last_pos + 1
        if pad:
            return _filled(lengths, max_tokens)
        out = []
        for length in torch.unique(lengths).tolist():
            idx = torch.nonzero(lengths == length).flatten()
            per = max(1, max_tokens // length)
            out += [idx[i : i + per] for i in range(0, len(idx), per)]
        return out


def _filled(lengths: torch.Tensor, max_tokens: int) -> list[torch.Tensor]:
    """Row groups, longest prompts first (ties in row order), each as many rows as fit max_tokens
    at the width of its first (longest) row."""
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    out, i = [], 0
    while i < len(order):
        per = max(1, max_tokens // int(lengths[order[i]]))
        out.append(torch.tensor(order[i : i + per], dtype=torch.long))
        i += per
    return out
