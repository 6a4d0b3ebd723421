"""What an ablated head outputs instead of its own z: nothing (zero), its mean over the task set
(mean) or its output on another prompt of the set (resample).

Positions align only between prompts built the same way (same IOI template, same induction
prefix/suffix lengths, same fact relation) and of the same token length: such prompts form an
aligned group. Mean ablation uses the group's per-position mean where the group is large enough
(`min_group`), else the mean over all positions of the set, in both cases leaving the prompt itself
out; resampling pairs a prompt with another prompt of its group, else of its length, else any
other prompt (seeded).

Replacements are dicts layer -> tensor broadcastable to [N, T, H, Dh] (see Scanner.replacement);
4-D tensors are indexed by the rows of the prompt set the scanner runs on (`target`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from circuitloc.engine.layout import hooked
from circuitloc.engine.scan import Scanner
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.prompts import Prompts
from circuitloc.tasks.registry import Task


def _each_z(scanner: Scanner, prompts: Prompts, fn) -> None:
    """Clean head outputs of every layer, one length bucket at a time: fn(layer, rows, z[b, t, H, Dh])."""
    state: dict = {}
    hooks = scanner.z_hooks(lambda i, x: fn(i, state["rows"], scanner.heads(x)))
    dev = scanner.unembed.weight.device
    with hooked(hooks), torch.no_grad():
        for rows in prompts.buckets(scanner.max_batch_tokens):
            state["rows"] = rows
            scanner.base(input_ids=prompts.take(rows).input_ids.to(dev), use_cache=False)


def _factorize(keys) -> np.ndarray:
    """An id per key, numbered in order of first appearance."""
    ids: dict = {}
    return np.asarray([ids.setdefault(k, len(ids)) for k in keys], dtype=int)


def aligned_groups(df: pl.DataFrame, columns: tuple, lengths, min_group: int) -> np.ndarray:
    """Group id per prompt (same values in `columns` and same length), -1 where the group has fewer
    than min_group prompts or the task has no alignment columns."""
    lengths = np.asarray(lengths)
    if not columns or any(c not in df.columns for c in columns):
        return np.full(len(df), -1)
    ids = _factorize(zip(*(df[c].to_list() for c in columns), lengths.tolist()))
    big = np.bincount(ids)[ids] >= min_group if len(ids) else np.zeros(0, bool)
    out = np.full(len(df), -1)
    out[big] = _factorize(ids[big].tolist())
    return out


def mean_replacement(scanner: Scanner, source: Prompts, target=None, groups=None) -> dict:
    """Each head's mean output over `source` with the target prompt itself left out (so no prompt
    keeps any share of its own output): per position within its aligned group (`groups` >= 0, two
    prompts or more), else over every real position of the other prompts. `target` (indices into
    source, default all) are the prompts the scanner will run; the result is 4-D, indexed by them."""
    H, Dh = scanner.n_heads, scanner.d_head
    groups = np.full(len(source), -1) if groups is None else np.asarray(groups).copy()
    target = np.arange(len(source)) if target is None else np.asarray(target)
    if (groups >= 0).any():  # a group of one has no other prompt to average: the set's mean instead
        groups[(groups >= 0) & (np.bincount(groups[groups >= 0])[np.maximum(groups, 0)] < 2)] = -1
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    width = int(source.last_pos.max()) + 1
    tw = int(source.last_pos[torch.as_tensor(target)].max()) + 1
    slot = np.full(len(source), -1)
    slot[target] = np.arange(len(target))
    pooled: dict[int, torch.Tensor] = {}
    sums: dict[int, torch.Tensor] = {}
    own: dict[int, torch.Tensor] = {}

    def add(i, rows, z):
        z = z.float()
        pooled[i] = pooled.get(i, 0) + z.sum(dim=(0, 1))
        r = rows.numpy()
        mine = own.setdefault(i, torch.zeros(len(target), tw, H, Dh, device=z.device))
        at = slot[r] >= 0
        if at.any():
            n = min(z.shape[1], tw)
            mine[torch.as_tensor(slot[r][at], device=z.device), :n] = z[torch.as_tensor(at, device=z.device), :n]
        g = torch.as_tensor(groups[r], device=z.device)
        keep = g >= 0
        if n_groups and bool(keep.any()):
            buf = sums.setdefault(i, torch.zeros(n_groups, width, H, Dh, device=z.device))
            buf[:, : z.shape[1]].index_add_(0, g[keep], z[keep])

    _each_z(scanner, source, add)
    length = (source.last_pos + 1).float()
    count = float(length.sum())
    t_len = length[torch.as_tensor(target)]
    tg = torch.as_tensor(groups[target])
    sizes = torch.as_tensor(np.bincount(groups[groups >= 0], minlength=n_groups), dtype=torch.float32)
    out = {}
    for i, p in pooled.items():
        mine = own[i]
        rest = (count - t_len).clamp(min=1.0).to(p.device)[:, None, None]
        r = ((p - mine.sum(dim=1)) / rest)[:, None].expand(len(target), tw, H, Dh).clone()
        m = tg >= 0
        if bool(m.any()):
            idx = tg[m].to(p.device)
            r[m.to(p.device)] = (sums[i][idx, :tw] - mine[m.to(p.device)]) / (sizes.to(p.device)[idx] - 1)[:, None, None, None]
        out[i] = r
    return out


def resample_sources(groups: np.ndarray, lengths, target, seed: int) -> np.ndarray:
    """For each target prompt, the index of another prompt of its aligned group, else one of the same
    length, else any other prompt; drawn with a fixed seed. Self only if the set has one prompt."""
    rng = np.random.default_rng(seed)
    groups, lengths = np.asarray(groups), np.asarray(lengths)
    everyone = np.arange(len(groups))
    out = []
    for t in np.asarray(target):
        for pool in ((groups == groups[t]) & (groups[t] >= 0), lengths == lengths[t], np.ones(len(groups), bool)):
            cand = everyone[pool & (everyone != t)]
            if len(cand):
                out.append(int(rng.choice(cand)))
                break
        else:
            out.append(int(t))
    return np.asarray(out, dtype=int)


def resample_replacement(scanner: Scanner, source: Prompts, target, sources) -> dict:
    """Each target prompt's heads output what they output on its paired source prompt, position by
    position; a shorter source repeats its last position's output."""
    H, Dh = scanner.n_heads, scanner.d_head
    target, sources = np.asarray(target), np.asarray(sources)
    src = source.take(torch.as_tensor(sources))
    tw = int(source.last_pos[torch.as_tensor(target)].max()) + 1
    out: dict[int, torch.Tensor] = {}

    def put(i, rows, z):
        buf = out.setdefault(i, torch.zeros(len(target), tw, H, Dh, device=z.device, dtype=torch.float32))
        n = min(z.shape[1], tw)
        buf[rows.to(z.device), :n] = z[:, :n].float()
        if n < tw:  # shorter source: hold its last output over the remaining positions
            buf[rows.to(z.device), n:] = z[:, n - 1 : n].float()

    _each_z(scanner, src, put)
    return out


# ---- the builders of the kinds that replace a unit's output (named by circuitloc.plan.vocabulary.vocab.KindSpec) --
@dataclass(frozen=True)
class ReplacementContext:
    """Everything a kind's builder may use, as one record, so a new kind's builder takes what it
    needs from it and its signature never grows with what other kinds need: the scanner (hooks,
    head layout), the whole task set as prompts and as dataset rows (alignment columns), the task
    (`tasks.registry.Task`; `align`: the columns along which positions align), the positions in
    the set of the prompts the job runs (`target`), the config's `ablation.min_group` and the run's
    seed."""

    scanner: Scanner
    prompts: Prompts
    rows: pl.DataFrame
    task: Task
    target: np.ndarray
    min_group: int
    seed: int

    @property
    def lengths(self) -> np.ndarray:
        return (self.prompts.last_pos + 1).numpy()


def builder(kind: str):
    """The replacement builder of an ablation kind, from its one registration (the vocabulary's
    KindSpec: "module:function"); None for a kind whose units output zero."""
    path = registry.kind(kind).builder
    if path is None:
        return None
    module, _, name = path.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"ablation kind {kind!r}: its builder {path!r} is not a function")
    return fn


def for_mean(ctx: ReplacementContext):
    """Mean ablation of a job: per-position means within aligned groups of >= min_group prompts of
    the whole task set, else the mean over positions. Returns (replacement, share aligned)."""
    groups = aligned_groups(ctx.rows, ctx.task.align, ctx.lengths, ctx.min_group)
    return mean_replacement(ctx.scanner, ctx.prompts, ctx.target, groups), float((groups[ctx.target] >= 0).mean())


def for_resample(ctx: ReplacementContext):
    """Resample ablation of a job: another prompt of the set, aligned where possible. Returns
    (replacement, share of prompts whose source is aligned)."""
    groups = aligned_groups(ctx.rows, ctx.task.align, ctx.lengths, 2)
    src = resample_sources(groups, ctx.lengths, ctx.target, ctx.seed)
    aligned = float(((groups[src] == groups[ctx.target]) & (groups[src] >= 0)).mean())
    return resample_replacement(ctx.scanner, ctx.prompts, ctx.target, src), aligned
