"""Pinned toys train to the bits stored in the repository, on whatever x86-64 CPU runs the tests.

The digests in toy_digests.json were written on one machine (bench/toy_digests.py --write); a CPU
of another maker or generation that trains other bits fails here, so the claim that a pinned toy
(circuitloc.kernels) is the same toy everywhere is checked on every machine the suite meets, not
only on the one that wrote it. Each training runs in a fresh process, pinned before torch starts."""

import platform
import sys
from pathlib import Path

import pytest
import torch

from circuitloc import kernels

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import toy_digests  # noqa: E402

pytestmark = [
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the kernel pin is x86-64's"),
    pytest.mark.skipif(not kernels.has_avx2(), reason="the pinned kernel path needs AVX2"),
]
STORED = toy_digests.stored()


def _check(case, config, model, steps):
    if torch.__version__.split("+")[0] != STORED["torch"]:
        pytest.skip(f"digests stored for torch {STORED['torch']}, this is {torch.__version__}")
    assert toy_digests.digest(config, model, steps) == STORED["digests"][case], (
        f"{model} ({steps or 'all'} steps, pinned) trained other weights on this CPU than the stored digest: "
        "the pinned kernel path is not the same here")


@pytest.mark.parametrize("case", toy_digests.SHORT, ids=[c[0] for c in toy_digests.SHORT])
def test_short_pinned_training_matches_the_stored_digest(case):
    _check(*case)


@pytest.mark.slow
def test_a_full_pinned_toy_matches_the_stored_digest():
    full = [c for c in toy_digests.CASES if c[3] is None]
    assert full
    for case in full:
        _check(*case)


def test_every_case_has_a_stored_digest_and_the_cases_are_pinned_toys():
    assert {c[0] for c in toy_digests.CASES + toy_digests.DEFAULT_TOYS} == set(STORED["digests"])
    for _, config, model, steps in toy_digests.CASES + toy_digests.DEFAULT_TOYS:
        assert toy_digests.spec_of(config, model, steps)["kernels"] == "pinned"
