"""`max_batch_tokens: auto`: how many tokens one forward pass of the engine may hold (prompts times
padded length, times the stacked copies of an ablation pass), sized when a job starts to the memory
its device has free; a number in the config is used as it is.

On a GPU the budget is `HEADROOM` of the free memory (torch.cuda.mem_get_info) divided by what one
token costs at a scan's peak (`token_bytes`), so it never asks for more than the device holds. On a
CPU (or mps) `auto` is the fixed `CPU_TOKENS`, the default config's own number: host memory is
shared with everything else and a CPU gains little from larger batches."""

from __future__ import annotations

import logging
import math

from circuitloc.modelcard import ModelCard
from circuitloc.plan.jobs.resources import DTYPE_BYTES

CPU_TOKENS = 4096
HEADROOM = 0.8  # of the free memory; the rest for the allocator's fragmentation and the logits
ACTIVATION_WIDTHS = 24  # one layer's activations per token, in d_model widths (q, k, v, z, MLP hidden, norms)
CONTEXT_BOUND = 512  # tokens a prompt may have, for eager attention's [heads, T, T] scores


def token_bytes(card: ModelCard) -> int:
    """Bytes one token of a batch costs at the peak of a scan: its cached residual stream at every
    layer's input (the resume's starting points), one layer's activations, and its row of attention
    scores in each head (eager; fused attention needs less)."""
    width = DTYPE_BYTES[card.dtype]
    cached = card.n_layers * card.d_model
    return width * (cached + ACTIVATION_WIDTHS * card.d_model + card.n_heads * CONTEXT_BOUND)


def auto_tokens(free_bytes: int, card: ModelCard) -> int:
    """The token budget that `free_bytes` of device memory holds for `card`'s model (at least 1:
    one prompt per pass is what the engine does with a budget below a prompt's length)."""
    return max(1, math.floor(HEADROOM * free_bytes / token_bytes(card)))


def batch_tokens(setting: int | str, card: ModelCard, device: str, free_bytes: int | None = None) -> int:
    """The budget a job runs with: the config's number, or for 'auto' `auto_tokens` of the device's
    free memory (`free_bytes`, else measured) on cuda and `CPU_TOKENS` elsewhere; logged either way."""
    if setting != "auto":
        return int(setting)
    log = logging.getLogger("circuitloc")
    if device.startswith("cuda"):
        if free_bytes is None:
            import torch

            free_bytes = torch.cuda.mem_get_info()[0]
        tokens = auto_tokens(free_bytes, card)
        log.info("max_batch_tokens auto: %d tokens (%.1f GiB free on %s, %d bytes per token for model %s)",
                 tokens, free_bytes / 2**30, device, token_bytes(card), card.name)
        return tokens
    log.info("max_batch_tokens auto: %d tokens (the fixed number on %s)", CPU_TOKENS, device)
    return CPU_TOKENS
