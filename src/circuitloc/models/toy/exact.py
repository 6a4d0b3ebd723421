"""The toy's training without MKL's vector math, whose results depend on the CPU.

Torch computes `sqrt`, `cos`, `sin` (and `exp`, `log`, `tanh`, ...) of a float tensor through MKL's
vector math library (VML) where torch is built with MKL. VML rounds within about an ulp, not
exactly, and its code path follows the CPU (approximation instructions, maker, vector width) rather
than MKL_CBWR: the pinned kernels of circuitloc.kernels trained other bits on an Intel Xeon than
on an AMD EPYC because Adam's `sqrt` came out otherwise in the last bit (bench/toy_vml.py finds
such ops). A toy's training takes none of them:

- `ExactAdamW` is torch's AdamW (the single-tensor update, step for step) with the square root of
  the second moment taken in float64 and rounded to float32. A float32's square root is far enough
  from every float32 rounding boundary that any float64 square root within an ulp rounds to the
  exactly rounded float32 one, on every CPU.
- `exact_rotary` gives the model a rotary embedding that reads cos and sin from a table made once
  in float64 and rounded to float32 (the angles are HF's, `position * inv_freq` in float32). A
  float64 value within an ulp rounds to the same float32 unless it lies within about 1e-15 of a
  rounding boundary; `rounded_table` computes those few entries in decimal arithmetic instead.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import torch
from torch import nn

# a float64 result may be off by an ulp (2**-52 relative); a table entry must be this much further
# from a float32 rounding boundary (half a float32 ulp, 2**-24 relative) for every CPU to round alike
_MARGIN = 2.0**-48


def exact_sqrt(x: torch.Tensor) -> torch.Tensor:
    """The exactly rounded square root of a float32 tensor, the same on every CPU."""
    return x.double().sqrt().to(x.dtype)


class ExactAdamW(torch.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay, no amsgrad) on the CPU, with `exact_sqrt` in the
    denominator: the same update as torch's single-tensor AdamW, operation for operation, except
    that torch's `sqrt` rounds as the CPU's MKL does."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["amsgrad"] or group["maximize"]:
                raise ValueError("ExactAdamW: amsgrad and maximize are not supported")
            beta1, beta2 = group["betas"]
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                if wd != 0:
                    p.mul_(1 - lr * wd)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1**step)
                denom = (exact_sqrt(exp_avg_sq) / (1 - beta2**step) ** 0.5).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)
        return loss


def rounded_table(angles: torch.Tensor, fn: str) -> torch.Tensor:
    """`fn` ("cos" or "sin") of float32 `angles`, exactly rounded to float32 on every CPU: torch's
    float64 result rounded, and where that lies within `_MARGIN` of a float32 rounding boundary
    (where another CPU's float64 could round the other way), `_decimal_float32`'s instead."""
    ang = angles.reshape(-1)
    exact = getattr(torch, fn)(ang.double())
    rounded = exact.float()
    # the two float32 neighbours of the rounded value bound the boundaries around it
    up = torch.nextafter(rounded, torch.full_like(rounded, float("inf"))).double()
    down = torch.nextafter(rounded, torch.full_like(rounded, float("-inf"))).double()
    r = rounded.double()
    gap = torch.minimum((exact - (r + down) / 2).abs(), ((r + up) / 2 - exact).abs())
    close = (gap <= _MARGIN * exact.abs().clamp_min(2.0**-126)).nonzero().view(-1).tolist()
    for i in close:
        rounded[i] = _decimal_float32(fn, float(ang[i]))
    return rounded.view(angles.shape)


def _decimal_float32(fn: str, x: float) -> float:
    """cos or sin of `x` exactly rounded to float32, from Python's decimal arithmetic at 60 digits
    (pure Python: the same on every CPU). The argument is reduced by 2 pi, then summed as a Taylor
    series (the decimal module documentation's recipes), then rounded once to 24 bits."""
    with localcontext() as ctx:
        ctx.prec = 60
        lasts, t, pi, n, na, d, da = 0, Decimal(3), Decimal(3), 1, 0, 0, 24
        while pi != lasts:  # pi by the documentation's series
            lasts, n, na, d, da = pi, n + na, na + 8, d + da, da + 32
            t = t * n / d
            pi += t
        y = Decimal(x)  # exact: a float is a binary fraction
        y -= (y / (2 * pi)).to_integral_value() * 2 * pi
        i, total, term = (0, Decimal(1), Decimal(1)) if fn == "cos" else (1, y, y)
        while True:
            i += 2
            term *= -y * y / (i * (i - 1))
            if total + term == total:
                break
            total += term
    q = Fraction(total)
    if q == 0:
        return 0.0
    e = math.floor(math.log2(abs(q)))
    while abs(q) >= Fraction(2) ** (e + 1):
        e += 1
    while abs(q) < Fraction(2) ** e:
        e -= 1
    scale = Fraction(2) ** (23 - e)  # a float32 significand's 24 bits, rounded half to even
    return float(round(q * scale) / scale)


class ExactRotary(nn.Module):
    """HF's default rotary embedding (Qwen2RotaryEmbedding: cos and sin of `position * inv_freq`,
    the frequencies repeated for both halves), read from a table made once for positions below
    `max_len`."""

    def __init__(self, rotary: nn.Module, max_len: int):
        super().__init__()
        if getattr(rotary, "rope_type", "default") != "default":
            raise ValueError(f"exact rotary: only the default rope type, not {rotary.rope_type!r}")
        freqs = torch.arange(max_len, dtype=torch.float)[:, None] * rotary.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(rotary.attention_scaling)
        self.register_buffer("cos_table", rounded_table(emb, "cos") * scale, persistent=False)
        self.register_buffer("sin_table", rounded_table(emb, "sin") * scale, persistent=False)

    def forward(self, x, position_ids):
        return self.cos_table[position_ids].to(x.dtype), self.sin_table[position_ids].to(x.dtype)


def exact_rotary(model, max_len: int) -> None:
    """Replace `model`'s rotary embedding (a Qwen2ForCausalLM) by `ExactRotary`, in place; the
    weights and what save_pretrained writes are unchanged."""
    model.model.rotary_emb = ExactRotary(model.model.rotary_emb, max_len)
