"""An ablation unit as a typed record: the query heads of one layer that the engine silences
together, and the label every artifact names it by. Standard library only, so code that reads
units (tables, figures) need not import torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """label: L{l}H{h} (a query head), L{l}G{g} (a kv group) or L{l} (a layer), the `unit` column of
    every scores, curve and control table; layer; head: its column in layer x head maps and tables
    (the head, the group, 0 for a layer); heads: the query heads it silences."""

    label: str
    layer: int
    head: int
    heads: tuple[int, ...]

    def __post_init__(self):
        if not self.heads:
            raise ValueError(f"unit {self.label!r}: no query heads to ablate")
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))

    def row(self) -> dict:
        """The unit's columns in a table: unit (its label), layer, head and heads (a list)."""
        return {"unit": self.label, "layer": self.layer, "head": self.head, "heads": list(self.heads)}

    def __getitem__(self, key: str):
        """Dict-style reads of `row()` (u["unit"], u["heads"]): code and tests written when units
        were dicts read the same values."""
        return self.row()[key]
