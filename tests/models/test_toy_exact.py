"""The toy's training takes no CPU-dependent vector math (circuitloc.models.toy.exact), each
replacement checked against an independent computation."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from circuitloc.models import toy
from circuitloc.models.toy import exact
from circuitloc.models.toy.exact import ExactAdamW, exact_sqrt, rounded_table
from circuitloc.models.toy.training import fit, prepare

# the float ops torch sends to MKL's vector math (ATen's vml.h), whose last bit follows the CPU
VML_OPS = {"sqrt", "rsqrt_", "cos", "sin", "tan", "exp", "expm1", "log", "log10", "log1p", "tanh", "erf", "erfc",
           "erfinv", "acos", "asin", "atan", "sqrt_", "cos_", "sin_", "exp_", "log_", "tanh_"}


def _floats():
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.rand(20000, generator=g) * s for s in (1e3, 1.0, 1e-3, 1e-20, 1e-38, 1e-44)]
                     + [torch.tensor([0.0, 1.0, 4.0, 2.0, float("inf")])])


def test_exact_sqrt_is_the_correctly_rounded_square_root():
    """Against numpy's float32 sqrt (IEEE's exactly rounded one), denormals included; torch's own sqrt
    (MKL's) is the contrast where this machine's MKL rounds otherwise."""
    x = _floats()
    want = np.sqrt(x.numpy())
    assert np.array_equal(exact_sqrt(x).numpy(), want)


def test_exact_adamw_is_torch_adamw_with_the_exact_sqrt():
    """ExactAdamW equals torch's AdamW bit for bit once torch's Tensor.sqrt is the exact one: the same
    update, operation for operation, for decayed and undecayed groups over several steps."""
    g = torch.Generator().manual_seed(1)
    init = [torch.randn(7, 5, generator=g), torch.randn(5, generator=g)]
    grads = [[torch.randn(t.shape, generator=g) for t in init] for _ in range(6)]

    def run(cls):
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        opt = cls([{"params": [ps[0]], "weight_decay": 0.01}, {"params": [ps[1]], "weight_decay": 0.0}],
                  lr=3e-3, betas=(0.9, 0.98), eps=1e-8)
        for step in grads:
            for p, gr in zip(ps, step):
                p.grad = gr.clone()
            opt.step()
        return [p.detach().clone() for p in ps]

    ours = run(ExactAdamW)
    plain = torch.Tensor.sqrt
    torch.Tensor.sqrt = lambda t: plain(t.double()).float()  # float64's sqrt rounded: the exact one
    try:
        theirs = run(lambda *a, **k: torch.optim.AdamW(*a, foreach=False, **k))
    finally:
        torch.Tensor.sqrt = plain
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_exact_rotary_equals_hf_rotary_to_an_ulp_and_positions_index_it():
    """The table's cos and sin are HF's (Qwen2RotaryEmbedding on the same angles) within one float32
    ulp, and a packed row's positions read the rows of its own positions."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    s = toy.resolve_spec({"n_layers": 1, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_mlp": 48})

    class Tok:
        bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    model = toy.build_model(s, 50, Tok())
    ours = model.model.rotary_emb
    hf = Qwen2RotaryEmbedding(config=model.config)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3, int(s["max_len"]) - 1]])
    x = torch.zeros(1, pos.shape[1], 32)
    for a, b in zip(ours(x, pos), hf(x, pos)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1.2e-7, atol=1.2e-7)
    assert torch.equal(ours(x, pos)[0][0, 3], ours(x, pos)[0][0, 0])


def _mpmath_rounded(fn, angles):
    """The exactly rounded float32 of fn at each float32 angle, by mpmath at 128 bits: independent of
    torch, of the CPU and of the code under test."""
    mpmath = pytest.importorskip("mpmath")  # torch's own dependency, through sympy

    out = []
    for a in angles.reshape(-1).tolist():
        with mpmath.workprec(128):
            v = getattr(mpmath, fn)(mpmath.mpf(a))
        with mpmath.workprec(24):
            out.append(float(+v))
    return torch.tensor(out, dtype=torch.float32).view(angles.shape)


@pytest.mark.parametrize("fn", ["cos", "sin"])
def test_rounded_table_is_exactly_rounded_and_its_careful_path_agrees(fn, monkeypatch):
    """A rotary table (d_head 16, 128 positions) equals mpmath's exactly rounded values entry for
    entry; with every entry sent down the careful path (decimal arithmetic: a margin wider than any
    gap) the table is the same."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float) / 16))
    emb = torch.arange(128, dtype=torch.float)[:, None] * inv[None, :]
    got = rounded_table(emb, fn)
    assert torch.equal(got, _mpmath_rounded(fn, emb))
    monkeypatch.setattr(exact, "_MARGIN", 1.0)
    assert torch.equal(rounded_table(emb[:12], fn), got[:12])


def test_a_toy_training_step_calls_no_vector_math():
    """Every op of two training steps of a toy (forward, backward, clip, AdamW), read at torch's
    dispatcher: none of MKL's vector-math ops on float32 (float64 is only the exact square root's)."""
    s = toy.resolve_spec({"n_layers": 1, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_mlp": 48, "steps": 2,
                          "batch": 8, "mix": {"ioi": 3, "induction": 3, "facts": 2}, "log_every": 0,
                          "eval_every": 0, "eval": {"n_ioi": 8, "n_induction": 8}})
    seen = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in VML_OPS:
                seen.append((name, args[0].dtype))
            return func(*args, **(kwargs or {}))

    run = prepare(s)
    with Seen():
        fit(run, lambda m: None)  # the training job's own loop: 2 steps
    assert seen and {d for _, d in seen} == {torch.float64}, seen[:5]
    assert {n for n, _ in seen} == {"sqrt"}


@pytest.mark.parametrize("bad", [{"amsgrad": True}, {"maximize": True}])
def test_exact_adamw_refuses_what_it_does_not_implement(bad):
    p = torch.nn.Parameter(torch.ones(2))
    opt = ExactAdamW([p], lr=1e-3, **bad)
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="not supported"):
        opt.step()
