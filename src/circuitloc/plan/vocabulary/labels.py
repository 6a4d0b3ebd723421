"""Ablation units and their labels: a unit is a query head, a kv group (every query head that
shares one key/value head) or a layer (every query head of one layer); one label per unit in every
artifact. Standard library only."""

from __future__ import annotations

import re

UNITS = ("query", "kv", "layer")
QUERY, KV, LAYER = UNITS

# ---- unit labels -----------------------------------------------------------------------------------
# One label per unit in every artifact: a query head L{layer}H{head}, a kv group L{layer}G{group}, a
# layer L{layer}; the column that names a table's top unit follows the unit.
UNIT_LABEL = {QUERY: re.compile(r"^L\d+H\d+$"), KV: re.compile(r"^L\d+G\d+$"), LAYER: re.compile(r"^L\d+$")}
TOP_COLUMN = {QUERY: "top_head", KV: "top_kv_group", LAYER: "top_layer"}


LABEL_FORMAT = {QUERY: "L{layer}H{index}", KV: "L{layer}G{index}", LAYER: "L{layer}"}


def unit_label(unit: str, layer: int, index: int = 0) -> str:
    if unit not in LABEL_FORMAT:
        raise ValueError(f"unknown unit {unit!r}: expected one of {', '.join(UNITS)}")
    return LABEL_FORMAT[unit].format(layer=layer, index=index)


def unit_kind(label: str) -> str:
    """'L3H1' -> query, 'L3G0' -> kv, 'L3' -> layer (the kind of unit a label names)."""
    for kind, pattern in UNIT_LABEL.items():
        if pattern.match(str(label)):
            return kind
    raise ValueError(f"not a unit label: {label!r}")
