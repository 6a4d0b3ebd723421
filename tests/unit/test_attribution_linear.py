"""Attribution is exact where the metric is linear in the head outputs z: a one-layer attention-only
model whose metric reads the residual's component along u at the last position. Checked against the
exact engine for every kind (zero, mean, resample) and unit (query heads, KV groups, the layer), with
a set of units already ablated, and with integrated gradients."""

import numpy as np
import pytest
import torch
from helpers import model_card, zeroed_qwen2

from circuitloc.engine import ablation
from circuitloc.engine.attribution import attribute, estimated_drops, unit_estimates
from circuitloc.engine.replacement import mean_replacement, resample_replacement
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts

D, H, KV, OFFSET, V = 16, 4, 2, 10.0, 8
U, W = 0, 1  # residual directions: what the metric reads, and the constant the norm is divided out by


def linear_model():
    """Qwen2, one layer, MLP zero, uniform attention (q, k zero) over values that vary with the
    token; heads write random amounts along u (never along w). Token t embeds to OFFSET*w + its own
    random vector off u and w. The final RMSNorm divides the residual x by rms(x): logit 1 reads
    x_u / rms, logit 3 reads x_w / rms = OFFSET / rms, so OFFSET * logit1 / logit3 = x_u, a linear
    function of every head's z (the layer's own input norm acts before z, so it does not matter)."""
    torch.manual_seed(0)
    m = zeroed_qwen2(vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=H,
                     num_key_value_heads=KV)
    with torch.no_grad():
        emb = torch.randn(V, D)
        emb[:, U], emb[:, W] = 0.0, OFFSET
        m.model.embed_tokens.weight[:] = emb
        attn = m.model.layers[0].self_attn
        attn.v_proj.weight[:] = torch.randn_like(attn.v_proj.weight)
        attn.v_proj.bias[:] = torch.randn_like(attn.v_proj.bias)
        attn.o_proj.weight[U] = torch.randn(H * D // H)
        m.lm_head.weight[1, U] = 1.0
        m.lm_head.weight[3, W] = 1.0
    return m


def x_u(logits, fields):
    return OFFSET * logits[:, 1] / logits[:, 3]


class _Task:
    metric_name, higher_is_better, extra = "x_u", True, {}
    metric = staticmethod(x_u)


def _prompts(n=6, t=5):
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([t, t - 1, t, t - 2, t, t - 1][:n])
    return Prompts(torch.randint(0, V, (n, t), generator=g), lengths - 1, {})


@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
@pytest.mark.parametrize("unit", ["query", "kv", "layer"])
def test_attribution_equals_the_exact_drop_on_a_linear_path(kind, unit):
    m, p = linear_model(), _prompts()
    sc = Scanner(m, H, D // H)
    if kind == "mean":
        sc.replacement = mean_replacement(sc, p)
    elif kind == "resample":
        sc.replacement = resample_replacement(sc, p, np.arange(len(p)), np.roll(np.arange(len(p)), 1))
    card = model_card(n_layers=1, n_heads=H, n_kv_heads=KV, d_head=D // H)
    us = ablation.units(card, unit)
    probe = ablation.Probe(sc, p, _Task)
    clean = float(probe.means([{}])[0])
    exact = probe.extend([], us) - clean
    est = unit_estimates(attribute(sc, p, x_u, sc.replacement), us)
    assert np.abs(exact).max() > 0.05  # the heads matter, so agreement is not 0 == 0
    np.testing.assert_allclose(est, exact, rtol=1e-4, atol=1e-5)
    # with a set already ablated (a greedy's state) and with integrated gradients: still exact
    if unit == "query":
        chosen = [us[0]]
        base = float(probe.extend([], chosen)[0])
        exact_more = base - probe.extend(chosen, us[1:])
        np.testing.assert_allclose(estimated_drops(probe, us[1:], chosen, steps=3), exact_more, rtol=1e-4, atol=1e-5)


def test_a_wrong_sign_convention_or_unit_sum_would_show():
    """The check above can fail: attribution of the layer unit differs from a single head's."""
    m, p = linear_model(), _prompts()
    sc = Scanner(m, H, D // H)
    att = attribute(sc, p, x_u)
    card = model_card(n_layers=1, n_heads=H, n_kv_heads=KV, d_head=D // H)
    layer = unit_estimates(att, ablation.units(card, "layer"))[0]
    heads = unit_estimates(att, ablation.units(card, "query"))
    assert layer == pytest.approx(heads.sum(), rel=1e-5) and abs(layer - heads[0]) > 1e-3
