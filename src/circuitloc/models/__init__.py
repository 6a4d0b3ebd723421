"""The models stage: every source ends as a card plus something `load` can open."""

from circuitloc.models.card import make_card
from circuitloc.models.load import load, load_hf

__all__ = ["make_card", "load", "load_hf"]
