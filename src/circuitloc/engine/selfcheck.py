"""The self-check every job runs before scoring: the engine's logits against a plain forward of the
same model on a few prompts, within a tolerance per dtype. A scanner inherits `SelfCheck` and
says what its reference model is and which logits it checks."""

from __future__ import annotations

import torch
from torch import nn

from circuitloc.engine.layout import input_device
from circuitloc.errors import EngineMismatchError
from circuitloc.prompts import Prompts

# Largest allowed |engine - reference| on logits, relative to max(1, largest |reference logit|),
# per dtype: a few units in the last place of the logits' scale (bfloat16 keeps 8 bits of mantissa,
# float16 11, float32 24), with room for a different summation order in batched matmuls.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> float:
    """The absolute tolerance on logits of magnitude up to `scale` computed in `dtype`."""
    return TOLERANCE.get(dtype, TOLERANCE[torch.float32]) * max(1.0, float(scale))


class SelfCheck:
    """The self-check half of a scanner (engine.scan.Scanner, engine.bridge.BridgeScanner)."""

    @torch.no_grad()
    def self_check(self, prompts: Prompts, n: int = 4) -> dict:
        """The engine's clean logits (`_checked_logits`) against a plain forward of the same model
        (`reference`), on the first `n` prompts of one length. Raises EngineMismatchError above
        `tolerance(dtype)`; returns the errors otherwise."""
        lengths = prompts.last_pos + 1
        idx = torch.nonzero(lengths == lengths[0]).flatten()[:n]
        sub = prompts.take(idx)
        dev = input_device(self.model)
        ids, last = sub.input_ids.to(dev), sub.last_pos.to(dev)
        rows = torch.arange(len(sub), device=dev)
        ref = self.reference(input_ids=ids, use_cache=False).logits[rows, last].float()
        self._finite(ref[None], "the plain forward's clean logits", [{}])
        got = self._checked_logits(sub)
        scale = float(ref.abs().max())
        tol = tolerance(self.dtype, scale)
        errors = {}
        for what, logits in got.items():
            self._finite(logits[None], f"the engine's {what}", [{}])
            errors[what] = err = float((logits.to(dev) - ref).abs().max())
            if not err <= tol:
                raise EngineMismatchError(
                    f"{self.label}: the {self.engine} engine's {what} differ from a plain forward of "
                    f"{type(self.reference).__name__} by {err:.3g} (tolerance {tol:.3g} for "
                    f"{str(self.dtype).removeprefix('torch.')} logits up to {scale:.3g}); this architecture "
                    f"is not supported by the {self.engine} engine")
        return errors

    @property
    def reference(self) -> nn.Module:
        """The plain Hugging Face model the self-check compares with."""
        return self.model

    def _checked_logits(self, sub: Prompts) -> dict[str, torch.Tensor]:
        """What the self-check compares: the clean logits from the embeddings, and resumed at layer
        0 and at a middle layer, [n, vocab] in float32."""
        dev = input_device(self.model)
        last = sub.last_pos.to(dev)
        resid = self.residuals(sub)
        mid = len(self.layers) // 2
        return {"last-position logits": self.last_logits(sub),
                "logits resumed at layer 0": self.resumed_logits(resid[0], 0, last).float(),
                f"logits resumed at layer {mid}": self.resumed_logits(resid[mid], mid, last).float()}
