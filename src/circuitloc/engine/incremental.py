"""Incremental resume: the step S ∪ {u} of a cumulative curve differs from S only from u's layer on.

For layers before u's, only S's ablations act, so the residual stream entering u's layer under
S ∪ {u} is S's own. `Incremental.extend` keeps the per-layer inputs of the forward under a base set
S (per prompt bucket) and resumes each addition at its own first layer, S's ablations at that
layer and later still applied. A step whose base extends the kept one (the next step of a ranked or
greedy curve) resumes that base from the kept stream too, so a curve of K steps costs what its
additions' layers cost, not K forwards from its earliest layer. Exact: the same numbers as
`Scanner.run` on the full sets (tests/models/test_incremental.py), within float rounding.

Memory: one kept stream per prompt set (every layer's input: n_layers x prompts x padded tokens x
d_model floats, e.g. SmolLM2-135M on 100 prompts of ~20 tokens: 30 x 2,000 x 576 x 4 B, about
140 MB), at most `KEEP` prompt sets (a greedy curve's scoring and curve prompts); `forget` frees it.
A scanner that does not resume (`prefix_reuse` off, the bridge engine) runs the full sets instead.
"""

from __future__ import annotations

import torch

from circuitloc.engine import batching
from circuitloc.engine.layout import hooked
from circuitloc.prompts import Prompts

KEEP = 2  # prompt sets whose base stream is kept (greedy alternates its scoring and curve prompts)


def _key(s: dict) -> frozenset:
    return frozenset((layer, h) for layer, hs in s.items() for h in hs)


def union(base: dict, addition: dict) -> dict:
    """The ablation set base ∪ addition ({layer: [query heads]})."""
    out = {layer: list(hs) for layer, hs in base.items()}
    for layer, hs in addition.items():
        out.setdefault(layer, []).extend(h for h in hs if h not in out[layer])
    return out


def _first_layer(pairs, n_layers: int) -> int:
    return min((layer for layer, _ in pairs), default=n_layers)


class Incremental:
    """Mixin of `scan.Scanner`: `extend`, cumulative steps resumed from a kept base stream."""

    def forget(self) -> None:
        """Drop every kept base stream (memory)."""
        self.__dict__["_bases"] = []

    def _kept(self) -> list:
        return self.__dict__.setdefault("_bases", [])

    def _keep(self, prompts: Prompts, key: frozenset, streams: list) -> None:
        kept = [e for e in self._kept() if e[0] is not prompts][-(KEEP - 1):] if KEEP > 1 else []
        self.__dict__["_bases"] = kept + [(prompts, key, self.max_batch_tokens, streams)]

    def _masks(self, sets: list[dict], start: int) -> dict:
        keep = {}
        for j, s in enumerate(sets):
            for layer, heads in s.items():
                if layer >= start:  # layers before `start` are skipped: their ablations are in the stream
                    keep.setdefault(layer, torch.ones(len(sets), self.n_heads))[j, list(heads)] = 0
        return keep

    def _capture(self, stream: list, start: int, sets: list[dict], sub: Prompts, rows):
        """(last-position logits of `sets` stacked, resumed at `start` from `stream`; with one set,
        the per-layer inputs of its forward, else None). Counts its share of a forward pass."""
        n_layers, copies = len(self.layers), len(sets)
        cache: dict[int, torch.Tensor] = {}
        grab = [(self.layers[i], lambda mod, args, kwargs, i=i: cache.__setitem__(
            i, (args[0] if args else kwargs["hidden_states"]).detach())) for i in range(start + 1, n_layers)]
        last = sub.last_pos.to(stream[0].device).repeat(copies)
        with self._ablating(self._masks(sets, start), copies, rows), hooked(grab if copies == 1 else [], True):
            logits = self._forward_from(stream, start, copies, last)
        self.forward_passes += copies * (n_layers - start) / n_layers * self._share
        batching.count(self, copies, sub.input_ids.numel())
        new = stream[: start + 1] + [cache[i] for i in range(start + 1, n_layers)] if copies == 1 else None
        return logits, new

    def _base_streams(self, prompts: Prompts, buckets: list, base: dict, width: int) -> list:
        """Per bucket, every layer's input under `base`: from a kept stream of a subset of `base`
        on the same prompts, resumed at the first layer it lacks, else from a clean forward."""
        n_layers, key = len(self.layers), _key(base)
        found = [e for e in self._kept() if e[0] is prompts and e[2] == self.max_batch_tokens and e[1] <= key]
        out = []
        for b, rows in enumerate(buckets):
            sub = prompts.take(rows)
            self._share = sub.input_ids.numel() / (len(prompts) * width)
            stream = found[-1][3][b] if found else self._starts(sub, self._share)
            missing = key - (found[-1][1] if found else frozenset())
            if missing:
                start = min(_first_layer(missing, n_layers), n_layers - 1)
                stream = self._capture(stream, start, [base], sub, rows)[1]
            out.append(stream)
        return out

    @torch.no_grad()
    def extend(self, prompts: Prompts, base: dict, additions: list[dict], metrics: dict, progress=None) -> dict:
        """Per-prompt metric values under base ∪ each addition: {name: [len(additions), N]}, as
        `run` on the full sets returns them. The base's own forward counts once; each addition
        resumes at its first layer. With one addition its stream is kept as the next base."""
        if not self.prefix_reuse:
            return self.run(prompts, [union(base, a) for a in additions], metrics, progress)
        n, width = prompts.input_ids.shape
        n_layers = len(self.layers)
        out = {k: torch.empty(len(additions), n) for k in metrics}
        buckets = self._buckets(prompts)
        streams = self._base_streams(prompts, buckets, base, width)
        full = [union(base, a) for a in additions]
        starts = [min(_first_layer(_key(a), n_layers), n_layers - 1) for a in additions]
        kept = []
        for b, rows in enumerate(buckets):
            sub = prompts.take(rows)
            self._share = sub.input_ids.numel() / (n * width)
            copies_max = max(1, self.max_batch_tokens // sub.input_ids.numel())
            for idx, start in batching.chunks(starts, copies_max, self.fill, n_layers):
                logits, new = self._capture(streams[b], start, [full[i] for i in idx], sub, rows)
                kept.append(new)
                fields = {k: v.to(logits.device).repeat(len(idx)) for k, v in sub.fields.items()}
                for name, fn in metrics.items():
                    vals = fn(logits, fields).float().cpu().view(len(idx), -1)
                    self._finite(vals, f"the {name}", [full[i] for i in idx])
                    out[name][torch.tensor(idx)[:, None], rows[None, :]] = vals
                if progress:
                    progress(len(idx) * len(rows) / n)
        if len(additions) == 1:
            self._keep(prompts, _key(full[0]), kept)
        else:
            self._keep(prompts, _key(base), streams)
        return out
