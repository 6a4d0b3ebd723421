import math

import numpy as np

from circuitloc import metrics


def test_damage_ioi_and_loss_conventions():
    assert metrics.drop(4.0, 1.0, True) == 3.0
    assert metrics.damage(4.0, 1.0, 0.0, True) == 0.75
    # induction: loss goes up from 0.5 to 2.0; the no-repeat loss 5.0 is 'task gone'
    assert math.isclose(float(metrics.damage(0.5, 2.0, 5.0, False)), 1.5 / 4.5)
    assert np.isnan(metrics.damage(0.0, 1.0, 0.0, True))


def test_heads_to_threshold_never_invents_a_number():
    assert metrics.heads_to_threshold([0.1, 0.5, 0.79, 0.8, 0.9], 0.8) == 4
    assert metrics.heads_to_threshold([0.1, 0.2], 0.8) is None
    h = metrics.HeadsTo.of_curve([0.1, 0.5, 0.79, 0.8], 0.8, 4)
    assert (h.count, h.bounded) == (4, False)
    h = metrics.HeadsTo.of_curve([0.1] * 30, 0.8, 60)
    assert (h.count, h.bounded) == (30, True) and h.label() == "> 30" and metrics.heads_to_label(30, True) == "> 30"
    assert metrics.heads_to_label(4, False) == "4" and metrics.heads_to_label(4.5, False) == "4.5"
    assert h.censored() == (30.0, 0.5, True)
    assert metrics.heads_to_threshold([float("nan"), 0.9], 0.8) == 2


def test_concentration_against_hand_values():
    c = metrics.concentration([3.0, 1.0, -2.0, 0.0])
    assert math.isclose(c["top_share"], 0.75)
    p = np.array([0.75, 0.25])
    assert math.isclose(c["effective_units"], math.exp(-(p * np.log(p)).sum()))
    assert math.isclose(metrics.concentration([1, 1, 1, 1])["effective_units"], 4.0)
    assert math.isnan(metrics.concentration([-1.0, 0.0])["top_share"])


def test_concentration_is_continuous_in_float_noise():
    # a unit whose drop is +/- float noise must not change the set the entropy sums over: before the
    # cut at a fraction of the largest drop, +1e-9 vs -1e-9 changed effective_units by ~0.1%
    for scale in (1.0, 1e-3):
        a = metrics.concentration(np.array([1.0, 0.5, 0.25, 1e-9]) * scale)
        b = metrics.concentration(np.array([1.0, 0.5, 0.25, -1e-9]) * scale)
        assert math.isclose(a["effective_units"], b["effective_units"], rel_tol=1e-9)
        assert math.isclose(a["top_share"], b["top_share"], rel_tol=1e-6)
    # drops well above the cut still count
    assert metrics.concentration([1.0, 1e-3])["effective_units"] > 1.0


def test_curve_area_against_a_hand_computed_trapezoid():
    # 4 units, damage 0.5, 0.9, 1.2 (clipped to 1), 1.0 at fractions 1/4 .. 1:
    # (0 + 0.5)/2/4 + (0.5 + 0.9)/2/4 + (0.9 + 1)/2/4 + (1 + 1)/2/4 = (0.25 + 0.7 + 0.95 + 1) / 4
    assert metrics.curve_area([0.5, 0.9, 1.2, 1.0], 4) == np.float64(2.9 / 4)
    # a curve that stops after 2 of 4 units is held at its last damage: 0.25 * 0.25 + 0.25 * 0.7 + 0.5 * 0.9
    assert math.isclose(metrics.curve_area([0.5, 0.9], 4), 0.0625 + 0.175 + 0.45)
    # one unit removes the task: area close to 1; damage linear in units: 1/2
    assert metrics.curve_area([1.0] * 10, 10) > 0.94 and math.isclose(metrics.curve_area(np.arange(1, 11) / 10, 10), 0.5)
    assert math.isnan(metrics.curve_area([], 4))


def test_heads_to_is_one_value_with_one_label_and_its_threshold_in_the_name():
    h = metrics.HeadsTo.of_curve([0.2, 0.85, 0.95], 0.9, 16)
    assert (h.count, h.bounded, h.label()) == (3, False, "3")
    b = metrics.HeadsTo.of_curve([0.2, 0.85], 0.9, 16)
    assert (b.count, b.bounded, b.label(), b.censored()) == (2, True, "> 2", (2.0, 0.125, True))
    assert b.columns("heads_to_90")["heads_to_90_bounded"] and math.isnan(b.columns("heads_to_90")["heads_to_90_frac"])
    assert metrics.heads_to_name(0.8) == "heads_to_80" and metrics.heads_to_name(0.9, "greedy") == "heads_to_90_greedy"
    assert metrics.heads_to_name(0.755) == "heads_to_75_5"
