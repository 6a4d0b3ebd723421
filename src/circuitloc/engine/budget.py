"""`max_batch_tokens: auto`: how many tokens one forward pass of the engine may hold (prompts times
padded length, times the stacked copies of an ablation pass), sized when a job starts to the memory
its device has free; a number in the config is used as it is.

On a GPU the budget is `HEADROOM` of the free memory (torch.cuda.mem_get_info) divided by what one
token costs at a scan's peak (`token_bytes`), so it never asks for more than the device holds. On a
CPU (or mps) `auto` is the fixed `CPU_TOKENS`, the default config's own number: host memory is
shared with everything else and a CPU gains little from larger batches.

On a GPU the budget is sized twice: when the job's scanner is built (the model loaded), and again by
`settled` once the job holds its replacement (mean, resample), less what it will keep beside its
passes (`reserve`: incremental resume's kept residual streams, and a greedy curve's selection job's
replacement); the smaller of the two is used. A CPU's fixed number is never re-sized."""

from __future__ import annotations

import logging
import math

from circuitloc.modelcard import ModelCard
from circuitloc.plan.jobs.resources import DTYPE_BYTES

CPU_TOKENS = 4096
HEADROOM = 0.8  # of the free memory; the rest for the allocator's fragmentation and the logits
ACTIVATION_WIDTHS = 24  # one layer's activations per token, in d_model widths (q, k, v, z, MLP hidden, norms)
KEPT_STREAMS = 3  # engine.incremental.KEEP prompt sets' kept streams, and the one a step builds beside them
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


def stream_bytes(card: ModelCard) -> int:
    """Bytes of one kept residual stream per token of a prompt set: every layer's input."""
    return DTYPE_BYTES[card.dtype] * card.n_layers * card.d_model


def reserve(card: ModelCard, prompt_tokens: int, replacement_bytes: int) -> int:
    """Bytes a job keeps beside its passes, over `prompt_tokens` (its prompts times their padded
    length): `KEPT_STREAMS` residual streams of incremental resume (engine.incremental keeps one per
    prompt set, for the curve and the greedy selection prompts, while a step builds the next), and its
    replacement's `replacement_bytes` once more (a curve job's greedy selection job builds its own,
    on the scoring prompts). Both are upper bounds where the scoring prompts are no more than the
    curve prompts (config/paper.yaml: IOI 20 of 500, induction 200 of 200)."""
    return KEPT_STREAMS * stream_bytes(card) * prompt_tokens + replacement_bytes


def settled(budget: int, setting: int | str, card: ModelCard, device: str, keeps: int,
            free_bytes: int | None = None) -> int:
    """The budget once the job holds its model and replacement: on cuda with 'auto', `auto_tokens` of
    the memory free now (`free_bytes`, else measured) less `keeps` (`reserve`), at most `budget`
    (the first sizing); else `budget` unchanged (a number in the config, the CPU's fixed number)."""
    if setting != "auto" or not device.startswith("cuda"):
        return budget
    if free_bytes is None:
        import torch

        free_bytes = torch.cuda.mem_get_info()[0]
    tokens = min(budget, auto_tokens(max(0, free_bytes - keeps), card))
    logging.getLogger("circuitloc").info(
        "max_batch_tokens auto, settled: %d tokens (%.1f GiB free on %s after the model and replacement, "
        "%.2f GiB kept for resume and selection)", tokens, free_bytes / 2**30, device, keeps / 2**30)
    return tokens


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
