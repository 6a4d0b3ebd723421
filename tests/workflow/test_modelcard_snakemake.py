"""Every card the tiny workflow run writes reads back and writes the very same bytes (the card's
record itself: unit/test_modelcard.py)."""

from pathlib import Path

import pytest

from circuitloc.modelcard import ModelCard


def round_trips(path: Path) -> ModelCard:
    """Read, write elsewhere, compare the bytes; the written card reads back equal."""
    card = ModelCard.read(path)
    again = path.with_name(path.name + ".again")
    card.write(again)
    assert again.read_bytes() == path.read_bytes(), path
    assert ModelCard.read(again) == card
    again.unlink()
    return card


@pytest.mark.workflow
def test_every_card_of_the_tiny_run_round_trips(tiny_run):
    cards = sorted((tiny_run / "results" / "models").glob("*/card.json"))
    assert len(cards) >= 2
    for path in cards:
        card = round_trips(path)
        assert card.source == "toy" and card.checks is not None and card.engine == "scan"
