"""Bootstrap intervals and agreement measures against known answers."""

import numpy as np
import pytest

from circuitloc.stats import agreement, bootstrap_weights, drop_intervals


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    clean = rng.normal(3.0, 1.0, n)
    ablated = np.stack([clean - rng.normal(d, 1.0, n) for d in (2.0, 0.5, 0.0)])
    return clean, ablated


def test_intervals_contain_the_estimate_and_shrink_with_more_prompts():
    widths = []
    for n in (20, 80, 320):
        clean, ablated = _data(n)
        iv = drop_intervals(clean, ablated, True, n_boot=1000, seed=0)
        est = clean.mean() - ablated.mean(axis=1)
        assert np.all(iv["lo"] <= est) and np.all(est <= iv["hi"])
        widths.append(float(np.mean(iv["hi"] - iv["lo"])))
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] == pytest.approx(4, rel=0.3)  # width ~ 1/sqrt(n)


def test_intervals_for_a_loss_and_the_top_unit_frequency():
    clean, ablated = _data(60)
    up = drop_intervals(clean, ablated, True, 500, 1)
    down = drop_intervals(-clean, -ablated, False, 500, 1)  # a loss: increase = drop
    assert np.allclose(up["lo"], down["lo"]) and np.allclose(up["hi"], down["hi"])
    assert up["top_freq"].sum() == pytest.approx(1.0)
    assert up["top_freq"][0] > 0.99  # the unit with a clear effect stays top


def test_bootstrap_is_seeded_and_resamples_with_replacement():
    w = bootstrap_weights(10, 50, seed=3)
    assert np.allclose(w.sum(axis=1), 1.0) and np.array_equal(w, bootstrap_weights(10, 50, seed=3))
    assert (w == 0).any()  # some prompts left out of some resamples


def test_agreement():
    labels = np.array(["a", "b", "c", "d", "e", "f"])
    same = agreement([6, 5, 4, 3, 2, 1], [60, 50, 40, 30, 20, 10], labels)
    assert same["same_top"] and same["spearman"] == pytest.approx(1.0) and same["top5_overlap"] == 1.0
    rev = agreement([6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6], labels)
    assert not rev["same_top"] and rev["spearman"] == pytest.approx(-1.0) and rev["top5_overlap"] == pytest.approx(0.8)
