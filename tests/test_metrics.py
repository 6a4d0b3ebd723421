import math

import numpy as np

from circuitloc import metrics as M


def test_damage_ioi_and_loss_conventions():
    assert M.drop(4.0, 1.0, True) == 3.0
    assert M.damage(4.0, 1.0, 0.0, True) == 0.75
    # induction: loss goes up from 0.5 to 2.0; the no-repeat loss 5.0 is 'task gone'
    assert math.isclose(float(M.damage(0.5, 2.0, 5.0, False)), 1.5 / 4.5)
    assert np.isnan(M.damage(0.0, 1.0, 0.0, True))


def test_heads_to_threshold_never_invents_a_number():
    assert M.heads_to_threshold([0.1, 0.5, 0.79, 0.8, 0.9]) == 4
    assert M.heads_to_threshold([0.1, 0.2]) is None
    assert M.heads_to([0.1, 0.5, 0.79, 0.8], 0.8) == (4, False)
    assert M.heads_to([0.1] * 30, 0.8) == (30, True) and M.heads_to_label(30, True) == "> 30"
    assert M.heads_to_label(4, False) == "4" and M.heads_to_label(4.5, False) == "4.5"
    assert M.heads_to_censored(30, True, 60) == (30.0, 0.5, True)
    assert M.heads_to_lower_bound(30, True, 62) == (31.0, 0.5, True)
    assert M.heads_to_threshold([float("nan"), 0.9]) == 2


def test_concentration_against_hand_values():
    c = M.concentration([3.0, 1.0, -2.0, 0.0])
    assert math.isclose(c["top_share"], 0.75)
    p = np.array([0.75, 0.25])
    assert math.isclose(c["effective_units"], math.exp(-(p * np.log(p)).sum()))
    assert math.isclose(M.concentration([1, 1, 1, 1])["effective_units"], 4.0)
    assert math.isnan(M.concentration([-1.0, 0.0])["top_share"])


def test_concentration_is_continuous_in_float_noise():
    # a unit whose drop is +/- float noise must not change the set the entropy sums over: before the
    # cut at a fraction of the largest drop, +1e-9 vs -1e-9 changed effective_units by ~0.1%
    for scale in (1.0, 1e-3):
        a = M.concentration(np.array([1.0, 0.5, 0.25, 1e-9]) * scale)
        b = M.concentration(np.array([1.0, 0.5, 0.25, -1e-9]) * scale)
        assert math.isclose(a["effective_units"], b["effective_units"], rel_tol=1e-9)
        assert math.isclose(a["top_share"], b["top_share"], rel_tol=1e-6)
    # drops well above the cut still count
    assert M.concentration([1.0, 1e-3])["effective_units"] > 1.0
