"""Incremental resume (engine.incremental): a cumulative step resumed at its new unit's layer from
the kept stream of the step before gives the numbers of `Scanner.run` on the full sets (the engine
before resume, itself checked against a plain forward in test_scan/test_architectures), on tiny
random models of three architectures, for ranked curve steps, greedy choices and a replacement
(mean-style) ablation; and it counts fewer forward passes, by the count its layers predict."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from arch_helpers import tiny_arch
from helpers import ld, random_prompts, tiny_model

from circuitloc.engine.ablation import Baseline, Probe, as_sets, ranked_curve
from circuitloc.engine.greedy import Greedy, greedy_curve
from circuitloc.engine.scan import Scanner
from circuitloc.units import Unit

VOCAB = 40
TASK = SimpleNamespace(metric_name="ld", metric=ld, extra={"neg": lambda lg, f: -ld(lg, f)}, higher_is_better=True)


def model(kind):
    return tiny_arch("gemma2", VOCAB) if kind == "gemma2" else tiny_model(kind, VOCAB)


def scanner(kind, incremental=True, replacement=None):
    sc = Scanner(model(kind), n_heads=4, d_head=16, max_batch_tokens=48, replacement=replacement)
    sc.incremental = incremental
    return sc


def all_units():
    return [Unit(f"L{layer}H{h}", layer, h, (h,)) for layer in range(3) for h in range(4)]


def mixed_order(seed=0):
    """Late layers before early ones and back: every resume case (a base with units above and below)."""
    order = all_units()
    rng = np.random.default_rng(seed)
    return [order[i] for i in rng.permutation(len(order))]


@pytest.mark.parametrize("kind", ["qwen_gqa", "neox", "gemma2"])
def test_ranked_steps_equal_full_set_runs(kind):
    prompts = random_prompts(VOCAB, n=9, seed=1)  # mixed lengths and max_batch_tokens 48: several buckets
    order = mixed_order()
    sc = scanner(kind)
    rows = ranked_curve(Probe(sc, prompts, TASK), order, Baseline(1.0, 0.0), len(order))
    ref = scanner(kind).run(prompts, [as_sets(order[: k + 1]) for k in range(len(order))],
                            {"ld": ld, "neg": TASK.extra["neg"]})
    np.testing.assert_allclose([r["ld"] for r in rows], ref["ld"].mean(dim=1).numpy(), atol=1e-5)
    np.testing.assert_allclose([r["neg"] for r in rows], ref["neg"].mean(dim=1).numpy(), atol=1e-5)
    # per prompt too, through extend directly: a base with units on every layer, additions on each
    base, adds = as_sets(order[:5]), [as_sets([u]) for u in order[5:]]
    got = sc.extend(prompts, base, adds, {"ld": ld})["ld"]
    want = scanner(kind).run(prompts, [as_sets(order[:5] + [u]) for u in order[5:]], {"ld": ld})["ld"]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_replacement_ablation_resumes_exactly():
    prompts = random_prompts(VOCAB, n=9, seed=2)
    g = torch.Generator().manual_seed(0)
    repl = {layer: torch.randn(9, 8, 4, 16, generator=g) for layer in range(3)}  # per prompt and position
    order = mixed_order(1)
    rows = ranked_curve(Probe(scanner("qwen_mha", replacement=repl), prompts, TASK), order, Baseline(1.0, 0.0), 12)
    ref = scanner("qwen_mha", replacement=repl).run(prompts, [as_sets(order[: k + 1]) for k in range(12)], {"ld": ld})
    np.testing.assert_allclose([r["ld"] for r in rows], ref["ld"].mean(dim=1).numpy(), atol=1e-5)


@pytest.mark.parametrize("kind", ["qwen_gqa", "neox", "gemma2"])
def test_greedy_choices_and_values_equal_todays(kind):
    sel_p, cur_p = random_prompts(VOCAB, n=6, seed=3), random_prompts(VOCAB, n=9, seed=4)
    curves = []
    for incremental in (True, False):
        sc = scanner(kind, incremental)
        sel = Probe(sc, sel_p, TASK)
        clean_sel = float(sel.means([{}])[0])
        curves.append(greedy_curve(Probe(sc, cur_p, TASK), all_units(), Baseline(1.0, 0.0), Greedy(5, 8),
                                   select=(sel, clean_sel)))
    assert [r["unit"] for r in curves[0]] == [r["unit"] for r in curves[1]]
    np.testing.assert_allclose([r["ld"] for r in curves[0]], [r["ld"] for r in curves[1]], atol=1e-5)


def test_forward_passes_drop_by_the_count_the_layers_predict():
    prompts = random_prompts(VOCAB, n=9, seed=1)
    order = [u for u in all_units() if u.layer == 0][:1] + [u for u in all_units() if u.layer > 0]
    counts = {}
    for incremental in (True, False):
        sc = scanner("qwen_gqa", incremental)
        ranked_curve(Probe(sc, prompts, TASK), order, Baseline(1.0, 0.0), len(order))
        counts[incremental] = sc.forward_passes
    # resumed: one clean pass, then each step from its own unit's layer (3 layers); before: every
    # set starts at layer 0 once L0H0 is in it, so each of the 9 steps is a whole pass, plus the clean
    # one (both in units of a padded pass over all prompts: the buckets' trimmed share of it, `full`)
    lengths = (prompts.last_pos + 1).float()
    full = float(lengths.sum() / (len(prompts) * prompts.input_ids.shape[1]))
    assert counts[True] == pytest.approx(full * (1 + sum((3 - u.layer) / 3 for u in order)))
    assert counts[False] == pytest.approx(full * (1 + len(order)))
    assert counts[True] < 0.6 * counts[False]
