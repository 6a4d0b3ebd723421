"""The exact ablation engine.

Ablating a head in layer l cannot change the residual stream before layer l, so the clean
residual is cached once and each ablated run resumes at its first ablated layer. Several ablation
sets run in one forward pass as stacked copies of the batch, and logits are computed only at each
prompt's last real position. Every number equals the naive one-hook-per-forward loop.

The cached residual is written straight into the resumed layer's input, and logits come out of
the model's own causal-LM head (so an embedding transform in the base model's forward, such as
Bloom's embedding norm, and a logit transform in the head's forward, such as Gemma 2's soft-cap,
are neither repeated nor skipped). `Scanner.self_check` compares the engine with a plain forward
of the same model on a few prompts; jobs run it before scoring.

What code built on the engine (replacement.py, attribution.py) may use is public and named: `out_proj`
(where head outputs z enter a layer's output projection), `split_heads`/`merge_heads` (z's layout),
`hooked`, and the Scanner's `z_hooks`, `heads`, `logits_from_embeddings` and `resumed_logits` (the
forward from embeddings, or resumed at a layer, to last-position logits); tests/unit/test_engine_vocabulary.py
checks that they reach for nothing private.

`BridgeScanner` (engine.bridge) is the generic exact path for architectures the fast engine does not know: the same
interface, heads ablated at TransformerLens 4's `blocks.{l}.attn.hook_z`, one full forward per
stacked batch (no resume), so slower with the same numbers. `engine.select.scanner_for` chooses.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import nn

from circuitloc.engine.layout import (
    Skip,
    decoder_layers,
    hooked,
    input_device,
    merge_heads,
    out_proj,
    split_heads,
)
from circuitloc.engine import batching
from circuitloc.engine.incremental import Incremental
from circuitloc.engine.selfcheck import SelfCheck
from circuitloc.errors import (
    NonFiniteError,
)
from circuitloc.prompts import Prompts

Metric = Callable[[torch.Tensor, dict], torch.Tensor]
Ablation = dict  # {layer: [query heads]}


def describe(ablation: Ablation) -> str:
    """'clean run' or the ablated heads, e.g. 'L1H2+L1H3'."""
    return "+".join(f"L{layer}H{h}" for layer, hs in sorted(ablation.items()) for h in hs) or "clean run"


class Scanner(SelfCheck, Incremental):
    """Runs ablation sets on a fixed prompt set and returns per-prompt metric values (`extend`:
    cumulative steps resumed from their base set's kept stream, engine.incremental)."""

    engine = "scan"  # which engine ran, as jobs record it (`BridgeScanner.engine`: "bridge")
    fill = False  # True: pad-merged buckets and merged start layers (engine.batching; `engine.select` sets it)

    def __init__(self, hf_model, n_heads: int, d_head: int, max_batch_tokens: int = 4096,
                 replacement: dict | None = None, prefix_reuse: bool = True):
        self.model = hf_model
        self.base = hf_model.base_model
        self.unembed = hf_model.get_output_embeddings()
        self.architecture = type(hf_model).__name__  # its row of layout.ARCHITECTURES, where it has one
        self.layers = decoder_layers(self.base, self.architecture)
        self.n_heads, self.d_head = n_heads, d_head
        self.max_batch_tokens = max_batch_tokens
        self.replacement = replacement or {}  # layer -> tensor broadcastable to [N, T, H, Dh]; zero if absent
        self.prefix_reuse = prefix_reuse
        self.forward_passes = 0.0  # in units of one full forward over the prompt set
        self.label = type(hf_model).__name__  # who is scanned, for error messages (jobs add model, task, ...)
        self._tuple_layers: bool | None = None  # whether a layer returns a tuple (`_Skip`); probed once
        for layer in self.layers[:1]:
            out_proj(layer, self.architecture)  # refuse an architecture without a known output projection now

    # -- plumbing -------------------------------------------------------------------------
    def _z_site(self, layer: int) -> nn.Module:
        """The module whose input is `layer`'s head outputs z, [B, T, H * Dh]."""
        return out_proj(self.layers[layer], self.architecture)

    def _layers_return_tuples(self) -> bool:
        """Whether a decoder layer returns a tuple (Falcon) rather than the residual itself, so that a
        skipped layer returns what the base model's loop expects. `residuals` sees it, and every
        resume starts from its cache; else (a resume from elsewhere) a one-token pass finds out."""
        if self._tuple_layers is None:
            self.residuals(Prompts(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long)))
        return self._tuple_layers

    @contextlib.contextmanager
    def _skipping(self, start: int):
        saved = [self.layers[i] for i in range(start)]
        as_tuple = self._layers_return_tuples() if start else False
        try:
            for i in range(start):
                self.layers[i] = Skip(as_tuple)
            yield
        finally:
            for i, mod in enumerate(saved):
                self.layers[i] = mod

    @contextlib.contextmanager
    def _resumed(self, start: int, resid: torch.Tensor):
        """Layers before `start` are skipped and layer `start` reads `resid` as its input, whatever
        the base model's forward did to its inputs_embeds on the way (scaling, norms, positions)."""
        def feed(mod, args, kwargs):
            if args:
                return (resid,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": resid}

        with hooked([(self.layers[start], feed)], with_kwargs=True), self._skipping(start):
            yield

    @contextlib.contextmanager
    def _ablating(self, keep: dict, copies: int, rows: torch.Tensor):
        """keep[layer]: [copies, H] with 0 where a head is ablated in that copy. The masks and row
        indices are copied to the device once per pass, not in every layer's hook call."""
        hooks, sites = [], {layer: self._z_site(layer) for layer in keep}
        w = getattr(next(iter(sites.values()), None), "weight", None)  # the bridge's hook points have none
        masks = torch.stack(list(keep.values())) if keep else None
        on = w.device if isinstance(w, torch.Tensor) and w.device.type != "meta" else None  # offloaded: meta
        masks = masks.to(on) if on is not None and keep else masks
        at_on = {}  # the rows on each replacement's device, copied once
        for i, layer in enumerate(keep):
            repl, site, mask = self.replacement.get(layer), sites[layer], masks[i]
            if repl is not None and repl.dim() == 4 and repl.device not in at_on:
                at_on[repl.device] = rows.to(repl.device)
            at = at_on[repl.device] if repl is not None and repl.dim() == 4 else None

            def hook(mod, args, mask=mask, repl=repl, at=at):
                x = args[0]
                b, t = x.shape[:2]
                z = split_heads(x.reshape(copies, b // copies, t, -1), self.n_heads, self.d_head)
                m = mask.to(z)[:, None, None, :, None]  # on z's device already: a cast at most, no copy
                z = z * m
                if repl is not None:
                    r = repl[at, :t] if at is not None else repl
                    z = z + (1 - m) * r.to(z)
                return (merge_heads(z).reshape(x.shape),) + tuple(args[1:])

            hooks.append((site, hook))
        with hooked(hooks):
            yield

    def _starts(self, sub: Prompts, share: float) -> list[torch.Tensor]:
        """What the ablated forwards of a bucket start from: every layer's clean input (one clean
        forward, `share` of a full pass), so that a set resumes at its first ablated layer."""
        self.forward_passes += share
        return self.residuals(sub)

    def _forward_from(self, starts: list[torch.Tensor], start: int, copies: int, last: torch.Tensor) -> torch.Tensor:
        """Last-position logits of `copies` stacked copies of the bucket, resumed at layer `start`."""
        return self.resumed_logits(starts[start].repeat(copies, 1, 1), start, last)

    # -- the engine's vocabulary: public, for what builds on the engine (replacement, attribution)
    def z_hooks(self, fn: Callable[[int, torch.Tensor], None]) -> list:
        """(module, hook) pairs for `hooked` that show every layer's head outputs to fn(layer, x) as
        they enter its output projection: x is [B, T, H * Dh] (`split_heads` gives [B, T, H, Dh]),
        the tensor itself, so fn may keep it (or its gradient); a tensor fn returns replaces x."""
        def hook_for(i):
            def hook(mod, args):
                out = fn(i, args[0])
                return (out,) + tuple(args[1:]) if isinstance(out, torch.Tensor) else None
            return hook

        return [(self._z_site(i), hook_for(i)) for i in range(len(self.layers))]

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """`split_heads` with this model's head count and width: [..., H * Dh] -> [..., H, Dh]."""
        return split_heads(x, self.n_heads, self.d_head)

    def logits_from_embeddings(self, embeds: torch.Tensor, last_pos: torch.Tensor) -> torch.Tensor:
        """Logits at each row's last position: the causal-LM forward from `embeds` (its
        inputs_embeds; inside `resumed_logits`, a stand-in that the resumed layer's input replaces), with whatever the
        model does after its output embedding (e.g. a soft-cap), that embedding fed the last
        positions only. Gradients flow when called under torch.enable_grad()."""
        rows = torch.arange(embeds.shape[0], device=embeds.device)

        def last_only(mod, args):
            x = args[0]  # on the output embedding's device, which a device_map may set apart
            return (x[rows.to(x.device), last_pos.to(x.device)][:, None],) + tuple(args[1:])

        with hooked([(self.unembed, last_only)]):
            return self.model(inputs_embeds=embeds, use_cache=False).logits[:, -1]

    def resumed_logits(self, resid: torch.Tensor, start: int, last_pos: torch.Tensor) -> torch.Tensor:
        """Logits of a forward resumed at layer `start` from its cached input `resid`. What the base
        model is handed as inputs_embeds only shapes its masks and positions (layer `start` reads
        `resid` instead): `resid` itself where the embedding is as wide, else zeros of the
        embedding's width (OPT-350m projects a narrower embedding in)."""
        width = self.model.get_input_embeddings().weight.shape[-1]
        stand_in = resid if resid.shape[-1] == width else resid.new_zeros(*resid.shape[:-1], width)
        with self._resumed(start, resid):
            return self.logits_from_embeddings(stand_in, last_pos)

    # -- plumbing ---------------------------------------------------------------------------
    def _finite(self, values: torch.Tensor, what: str, sets: list[Ablation]) -> None:
        """Non-finite numbers stop the job: they would pass silently into scores and tables."""
        values = values.reshape(len(sets), values.shape[1], -1)  # [sets, prompts, ...]
        bad = ~torch.isfinite(values).all(dim=-1)
        if bad.any():
            j = int(bad.any(dim=1).nonzero()[0])
            kind = "NaN" if torch.isnan(values[j]).any() else "inf"
            raise NonFiniteError(f"{self.label}: {what} is {kind} under {describe(sets[j])} on "
                                 f"{int(bad[j].sum())} of {bad.shape[1]} prompts (dtype "
                                 f"{str(self.dtype).removeprefix('torch.')}); no artifact written")

    @property
    def dtype(self) -> torch.dtype:
        return self.unembed.weight.dtype

    @torch.no_grad()
    def residuals(self, prompts: Prompts) -> list[torch.Tensor]:
        """Input to every layer (index L is unused); index 0 is the embedding output."""
        cache: dict[int, torch.Tensor] = {}
        hooks = [(layer, lambda mod, args, kwargs, i=i: cache.__setitem__(
            i, (args[0] if args else kwargs["hidden_states"]).detach())) for i, layer in enumerate(self.layers)]
        shape = self.layers[0].register_forward_hook(
            lambda mod, args, out: setattr(self, "_tuple_layers", isinstance(out, tuple)))  # see _Skip
        try:
            with hooked(hooks, with_kwargs=True):
                dev = input_device(self.model)
                embeds = self.model.get_input_embeddings()(prompts.input_ids.to(dev))
                self.base(inputs_embeds=embeds, use_cache=False)
        finally:
            shape.remove()
        return [cache[i] for i in range(len(self.layers))]

    def _chunks(self, ablations, copies_max, n_layers):
        """Sets that resume at the same layer share a pass, no set paying for an earlier start;
        filled (`fill`), a pass takes later starts too (engine.batching.chunks)."""
        starts = [min(s, default=n_layers) if self.prefix_reuse else 0 for s in ablations]
        for idx, _ in batching.chunks(starts, copies_max, self.fill, n_layers):
            yield idx

    def _buckets(self, prompts: Prompts) -> list[torch.Tensor]:
        return prompts.buckets(self.max_batch_tokens, pad=self.fill)

    # -- public ---------------------------------------------------------------------------
    @torch.no_grad()
    def last_logits(self, prompts: Prompts) -> torch.Tensor:
        """Clean logits at each prompt's last position, [N, vocab], in prompt order."""
        out = None
        for rows in self._buckets(prompts):
            sub = prompts.take(rows)
            dev = input_device(self.model)
            embeds = self.model.get_input_embeddings()(sub.input_ids.to(dev))
            logits = self.logits_from_embeddings(embeds, sub.last_pos.to(dev)).float().cpu()
            self._finite(logits[None], "the clean logits", [{}])
            out = torch.empty(len(prompts), logits.shape[-1]) if out is None else out
            out[rows] = logits
        return out

    @torch.no_grad()
    def run(self, prompts: Prompts, ablations: list[Ablation], metrics: dict[str, Metric],
            progress: Callable[[int], None] | None = None) -> dict[str, torch.Tensor]:
        """Per-prompt metric values for each ablation set: {name: [len(ablations), N]}.
        An empty set {} is the clean run."""
        n, width = prompts.input_ids.shape
        out = {k: torch.empty(len(ablations), n) for k in metrics}
        n_layers = len(self.layers)
        for rows in self._buckets(prompts):
            sub = prompts.take(rows)
            share = sub.input_ids.numel() / (n * width)  # of one padded forward over all prompts
            starts = self._starts(sub, share)
            copies_max = max(1, self.max_batch_tokens // sub.input_ids.numel())
            for idx in self._chunks(ablations, copies_max, n_layers):
                sets = [ablations[i] for i in idx]
                start = min((min(s, default=n_layers) for s in sets), default=n_layers)
                start = min(start, n_layers - 1) if self.prefix_reuse else 0
                copies = len(sets)
                keep = {}
                for j, s in enumerate(sets):
                    for layer, heads in s.items():
                        mask = keep.setdefault(layer, torch.ones(copies, self.n_heads))
                        mask[j, list(heads)] = 0
                dev = starts[0].device
                last = sub.last_pos.to(dev).repeat(copies)
                fields = {k: v.to(dev).repeat(copies) for k, v in sub.fields.items()}
                with self._ablating(keep, copies, rows):
                    logits = self._forward_from(starts, start, copies, last)
                self.forward_passes += copies * (n_layers - start) / n_layers * share
                batching.count(self, copies, sub.input_ids.numel())
                for name, fn in metrics.items():
                    vals = fn(logits, fields).float().cpu().view(copies, -1)
                    self._finite(vals, f"the {name}", sets)
                    out[name][torch.tensor(idx)[:, None], rows[None, :]] = vals
                if progress:
                    progress(copies * len(rows) / n)
        return out


