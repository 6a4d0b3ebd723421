"""A model whose answer is planted in two known heads: the scan finds them and the curve's
heads-to-80% is what a hand computation says."""

import math

import numpy as np
import polars as pl
import torch

from helpers import model_card, zeroed_qwen2

from circuitloc import metrics
from circuitloc.engine.ablation import Baseline, Probe, ranked_curve, score_units, units
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts
from circuitloc.report.tables.localization import table1
from circuitloc.stats import Bootstrap
from circuitloc.tasks.registry import TASKS

D, H = 16, 4
A_, B_ = (1, 2), (0, 3)  # (layer, head): strong and weak carriers of the answer
SCALE_A, SCALE_B, OFFSET = 3.0, 1.0, 10.0


def writer_model(n_kv, offset, writers):
    """A Qwen2 model with every weight zero except `writers` [(layer, head, scale)]: each such head's z
    is ones (value bias 1) and it writes scale * u; every token embeds to offset * w; the final
    RMSNorm reads LD = logit(a) - logit(b) along u. Input-independent, so computable by hand."""
    m = zeroed_qwen2(vocab_size=8, hidden_size=D, num_hidden_layers=2, num_attention_heads=H,
                     num_key_value_heads=n_kv)
    u, w = torch.zeros(D), torch.zeros(D)
    u[0], w[1] = 1.0, 1.0
    dh = D // H
    with torch.no_grad():
        m.model.embed_tokens.weight[:] = offset * w
        e = torch.ones(dh)
        for layer, head, scale in writers:
            attn = m.model.layers[layer].self_attn
            attn.v_proj.bias.fill_(1.0)
            attn.o_proj.weight[:, head * dh:(head + 1) * dh] = scale * torch.outer(u, e) / e.dot(e)
        m.lm_head.weight[1] = u
        m.lm_head.weight[2] = -u
    return m


def planted_model(n_kv):
    """Head A writes 3u, head B writes 1u, nothing else writes."""
    return writer_model(n_kv, OFFSET, ((*A_, SCALE_A), (*B_, SCALE_B)))


def ld_by_hand(x_u, eps):
    """LD = 2 * x_u / rms(x) for a residual with OFFSET on w and x_u on u."""
    return 2 * x_u / math.sqrt((x_u ** 2 + OFFSET ** 2) / D + eps)


def _as_jobs_write(scores: pl.DataFrame, curve: pl.DataFrame, clean: float, n: int) -> tuple[dict, dict]:
    """({model: scores}, {model: curve}) with the columns a score and a curve job add around the
    engine's rows (floor 0, zero ablation: nothing aligned, curves on all n prompts)."""
    job_cols = {"floor": pl.lit(0.0), "n_prompts": pl.lit(n), "metric": pl.lit("ld")}
    scores = scores.with_columns(**job_cols, aligned=pl.lit(float("nan")))
    curve = curve.with_columns(**job_cols, method=pl.lit("ranked"), clean=pl.lit(clean), prompts=pl.lit("all"))
    return {"planted": scores}, {"planted": curve}


def _cell(scores: pl.DataFrame, unit: str, col: str):
    """One unit's value in a scores table."""
    return scores.filter(pl.col("unit") == unit)[col].to_list()[0]


def test_planted_heads_rank_first_and_heads_to_80_matches_hand(tmp_path):
    for n_kv in (4, 2):
        m = planted_model(n_kv)
        eps = m.config.rms_norm_eps
        card = model_card(n_layers=2, n_heads=H, n_kv_heads=n_kv, d_head=D // H,
                          attention="mha" if n_kv == H else "gqa", family="planted", n_params=1)
        task = TASKS["ioi"]
        n = 6
        p = Prompts(torch.randint(3, 8, (n, 5)), torch.full((n,), 4), {"io_id": torch.full((n,), 1),
                                                                      "s_id": torch.full((n,), 2)})
        sc = Scanner(m, H, D // H)
        scores, _ = score_units(Probe(sc, p, task), units(card), floor=0.0)
        clean = ld_by_hand(SCALE_A + SCALE_B, eps)
        assert abs(scores["ld_clean"][0] - clean) < 1e-4
        top = scores.sort("drop", descending=True, maintain_order=True)
        assert (int(top["layer"][0]), int(top["head"][0])) == A_
        assert (int(top["layer"][1]), int(top["head"][1])) == B_
        assert np.allclose(top["drop"][2:].to_numpy(), 0, atol=1e-5)
        damage_a = 1 - ld_by_hand(SCALE_B, eps) / clean
        assert abs(top["damage"][0] - damage_a) < 1e-4
        ranked = [u for lbl in top["unit"] for u in units(card) if u["unit"] == lbl]
        curve = pl.DataFrame(ranked_curve(Probe(sc, p, task), ranked, Baseline(float(scores["ld_clean"][0]), 0.0), 4))
        assert damage_a < 0.8  # so heads-to-80% must be 2, not 1
        assert metrics.heads_to_threshold(curve["damage"], 0.8) == 2
        assert abs(curve["damage"][1] - 1.0) < 1e-5
        t1 = table1("ioi", {"planted": card}, *_as_jobs_write(scores, curve, clean, n), 0.8)
        assert t1["top_head"][0] == f"L{A_[0]}H{A_[1]}" and t1["heads_to_80"][0] == 2
        assert not t1["heads_to_80_bounded"][0]
        h = metrics.HeadsTo.of_curve(curve["damage"][:1].to_numpy(), 0.8, len(ranked))
        assert (h.count, h.bounded) == (1, True)  # more than 1


def test_random_control_draws_every_layer_of_a_shallow_model_and_never_the_excluded_unit():
    """A 2-layer model's random control comes from both layers (its 'middle third' was layer
    0, often the top unit's own), never the excluded top unit; from six layers on, the middle third."""
    from circuitloc.engine.ablation import control_pool, random_control
    from circuitloc.metrics import control_layers

    m = planted_model(4)
    card = model_card(n_layers=2, n_heads=H, n_kv_heads=4, d_head=D // H)
    p = Prompts(torch.randint(3, 8, (3, 5)), torch.full((3,), 4), {"io_id": torch.full((3,), 1),
                                                                  "s_id": torch.full((3,), 2)})
    sc = Scanner(m, H, D // H)
    top = f"L{A_[0]}H{A_[1]}"
    probe, pool = Probe(sc, p, TASKS["ioi"]), control_pool(units(card), 2, exclude=[top])
    ctrl = random_control(probe, pool, 1.0, draws=10, seed=0)
    assert set(ctrl["layer"]) == {0, 1} and top not in set(ctrl["unit"]) and len(ctrl) == 2 * H - 1
    silent = ctrl.filter(pl.col("unit") != f"L{B_[0]}H{B_[1]}")["ld"].to_numpy()
    assert np.allclose(silent, silent[0])  # heads that write nothing change nothing; B (L0H3) does
    again = random_control(probe, pool, 1.0, draws=2, seed=0)
    assert list(again["unit"]) == list(random_control(probe, pool, 1.0, draws=2, seed=0)["unit"])
    for n in range(1, 40):  # every layer below six; from six on [n // 3, 2n // 3), the middle third
        lo, hi = control_layers(n)
        assert (lo, hi) == ((0, n) if n < 6 else (n // 3, (2 * n) // 3)), n
        assert hi - lo >= min(n, 2)


# -- redundant query heads in one KV group: what a per-query-head score cannot see ------------------
OFF_R = 10.0                      # the residual's fixed part (on w): sets where the final RMSNorm saturates
RED, S_RED = (1, (0, 1)), 200.0   # layer 1, query heads 0 and 1 (KV group 0 of 4 query / 2 KV heads), each
S_H3, S_L0 = 2.0, 1.0             # layer 1 head 3 (KV group 1) and layer 0 head 1: small independent writers


def redundant_model():
    """Qwen2 GQA, 4 query heads sharing 2 KV heads. Heads 0 and 1 of layer 1 both write 200u: either
    alone saturates the final RMSNorm, so removing one barely moves LD = 2 x_u / rms(x); removing both
    (their KV group, or the whole layer) leaves only the small writers. Attention is uniform and every
    head's z is ones (value bias 1), so LD is input-independent and computable by hand."""
    return writer_model(2, OFF_R, ((1, 0, S_RED), (1, 1, S_RED), (1, 3, S_H3), (0, 1, S_L0)))


def ld_red(x_u, eps):
    """LD = 2 x_u / rms(x) for a residual with OFF_R on w and x_u on u (D = 16 dimensions)."""
    return 2 * x_u / math.sqrt((x_u ** 2 + OFF_R ** 2) / D + eps)


def ld_plain_forward(m, ids, zeroed: dict) -> float:
    """Independent of the scan engine: a plain Hugging Face forward in which a pre-hook on o_proj zeroes
    the z slices of the heads in `zeroed` ({layer: [heads]}); LD at the last position."""
    dh = D // H
    hooks = []
    for layer, heads in zeroed.items():
        def pre(mod, args, heads=heads):
            z = args[0].clone()
            for h in heads:
                z[..., h * dh:(h + 1) * dh] = 0
            return (z,)
        hooks.append(m.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            logits = m(ids).logits[:, -1]
    finally:
        for h in hooks:
            h.remove()
    return float((logits[:, 1] - logits[:, 2]).mean())


def test_redundant_query_heads_are_seen_by_the_kv_and_layer_units_only():
    m = redundant_model()
    eps = m.config.rms_norm_eps
    card = model_card(n_layers=2, n_heads=H, n_kv_heads=2, d_head=D // H, attention="gqa", family="planted",
                      n_params=1)
    task = TASKS["ioi"]
    n = 4
    ids = torch.randint(3, 8, (n, 5))
    p = Prompts(ids, torch.full((n,), 4), {"io_id": torch.full((n,), 1), "s_id": torch.full((n,), 2)})
    sc = Scanner(m, H, D // H)
    x_clean = 2 * S_RED + S_H3 + S_L0  # 403 on u
    clean = ld_red(x_clean, eps)
    assert abs(ld_plain_forward(m, ids, {}) - clean) < 1e-4
    by_unit = {}
    for kind in ("query", "kv", "layer"):
        s, _ = score_units(Probe(sc, p, task), units(card, kind), floor=0.0)
        assert abs(s["ld_clean"][0] - clean) < 1e-4
        by_unit[kind] = s
    # by hand: what is left on u after each ablation, and LD through a plain hooked forward
    cases = {("query", "L1H0"): (x_clean - S_RED, {1: [0]}), ("query", "L1H1"): (x_clean - S_RED, {1: [1]}),
             ("kv", "L1G0"): (S_H3 + S_L0, {1: [0, 1]}), ("kv", "L1G1"): (x_clean - S_H3, {1: [2, 3]}),
             ("layer", "L1"): (S_L0, {1: [0, 1, 2, 3]}), ("layer", "L0"): (x_clean - S_L0, {0: [0, 1, 2, 3]})}
    for (kind, label), (x_left, zeroed) in cases.items():
        hand = clean - ld_red(x_left, eps)
        plain = clean - ld_plain_forward(m, ids, zeroed)
        got = _cell(by_unit[kind], label, "drop")
        assert abs(hand - plain) < 1e-4, (label, hand, plain)
        assert abs(got - hand) < 1e-4, (label, got, hand)
    # each redundant query head alone: < 1% of LD; their KV group: ~71%; their layer: ~90%
    assert by_unit["query"]["damage"].max() < 0.01
    assert 0.6 < _cell(by_unit["kv"], "L1G0", "damage") < 0.8
    assert _cell(by_unit["layer"], "L1", "damage") > 0.85
    assert _cell(by_unit["layer"], "L1", "heads") == [0, 1, 2, 3] and _cell(by_unit["layer"], "L1", "head") == 0
    # Table 1 names the top unit by its kind; the layer unit needs one unit to reach 80%
    for kind, top, h80 in (("kv", "L1G0", 2), ("layer", "L1", 1)):
        s = by_unit[kind]
        ranked = [u for lbl in s.sort("drop", descending=True, maintain_order=True)["unit"]
                  for u in units(card, kind) if u["unit"] == lbl]
        curve = pl.DataFrame(ranked_curve(Probe(sc, p, task), ranked, Baseline(clean, 0.0), len(ranked)))
        t1 = table1("ioi", {"planted": card}, *_as_jobs_write(s, curve, clean, n), 0.8)
        top_col = {"kv": "top_kv_group", "layer": "top_layer"}[kind]  # named for what it holds
        assert "top_head" not in t1.columns
        assert (t1[top_col][0], t1["unit_kind"][0], t1["heads_to_80"][0]) == (top, kind, h80)
        assert t1["task_behaviour"][0]
    # with a per-prompt floor and the bootstrap: the model is input-independent, so every resample gives
    # the same damage and the interval collapses onto it (curves too)
    boot = Bootstrap(20, 0, 0.95)
    s, _ = score_units(Probe(sc, p, task), units(card, "layer"), floor=np.zeros(n), bootstrap=boot)
    assert np.allclose(s["damage_lo"], s["damage"], atol=1e-5) and np.allclose(s["damage_hi"], s["damage"], atol=1e-5)
    clean_pp = np.full(n, clean)
    c = pl.DataFrame(ranked_curve(Probe(sc, p, task), units(card, "layer")[::-1], Baseline(clean, np.zeros(n), clean_pp),
                                  2, bootstrap=boot))
    assert np.allclose(c["damage_lo"], c["damage"], atol=1e-4) and "top_freq" not in c.columns
