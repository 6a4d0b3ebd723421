"""What builds on the scan engine (replacement.py, attribution.py) uses only its public names: the
output projection, the z layout and the forward from embeddings are named functions of
`circuitloc.engine.scan`, so the engine can change its plumbing without breaking them."""

import ast
from pathlib import Path

import pytest

import circuitloc.engine.scan as scan

SRC = Path(scan.__file__).parent
CLIENTS = ("replacement.py", "attribution.py")


def private_uses(source: str) -> list[str]:
    """Names starting with one underscore imported from scan, and attributes starting with one
    underscore read anywhere (scanner._body, scan._out_proj, ...); dunders are not private."""
    def private(name):
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "scan":
            found += [f"from scan import {a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f".{node.attr} (line {node.lineno})")
    return found


def test_the_check_sees_private_names():
    bad = "from .scan import Scanner, _out_proj\nfrom circuitloc.engine import scan\ndef f(sc):\n" \
          "    scan._skip\n    return sc._body(1, 2), sc.__class__, sc.run"
    assert private_uses(bad) == ["from scan import _out_proj", "._skip (line 4)", "._body (line 5)"]


@pytest.mark.parametrize("client", CLIENTS)
def test_replacement_and_attribution_use_only_public_names_of_scan(client):
    source = (SRC / client).read_text()
    assert private_uses(source) == [], f"{client} reaches into the engine's private names"
    imported = [a.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[-1] == "scan" for a in node.names]
    assert imported and all(hasattr(scan, name) for name in imported)


def test_units_are_typed_records_with_the_old_labels():
    from dataclasses import FrozenInstanceError

    from helpers import model_card

    from circuitloc.engine.ablation import as_sets, units
    from circuitloc.units import Unit

    card = model_card(n_layers=2, n_heads=4, n_kv_heads=2)
    want = {"query": [(f"L{i}H{h}", i, h, (h,)) for i in range(2) for h in range(4)],
            "kv": [(f"L{i}G{g}", i, g, (2 * g, 2 * g + 1)) for i in range(2) for g in range(2)],
            "layer": [(f"L{i}", i, 0, (0, 1, 2, 3)) for i in range(2)]}
    for kind, rows in want.items():
        got = units(card, kind)
        assert all(isinstance(u, Unit) for u in got)
        assert [(u.label, u.layer, u.head, u.heads) for u in got] == rows
    u = units(card, "kv")[3]
    assert u.row() == {"unit": "L1G1", "layer": 1, "head": 1, "heads": [2, 3]} and u["heads"] == [2, 3]
    assert as_sets([u, units(card)[0]]) == {1: [2, 3], 0: [0]}
    with pytest.raises(FrozenInstanceError):
        u.layer = 0
    with pytest.raises(ValueError, match="L0H9"):
        Unit("L0H9", 0, 9, ())
