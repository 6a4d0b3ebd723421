"""Every card the tiny workflow run writes reads back and writes the very same bytes (the card's
record itself: unit/test_modelcard.py)."""


import pytest

from helpers import round_trips


@pytest.mark.workflow
def test_every_card_of_the_tiny_run_round_trips(tiny_run):
    cards = sorted((tiny_run / "results" / "models").glob("*/card.json"))
    assert len(cards) >= 2
    for path in cards:
        card = round_trips(path)
        assert card.source == "toy" and card.checks is not None and card.engine == "scan"
