"""The IOI templates and word lists (resources/ioi): the IOI paper's 15 BABA templates and their 15
ABBA forms, names, places and objects, and how a template is filled."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from circuitloc import shipped
from circuitloc.errors import DatasetError
from circuitloc.plan.config.hub import FAHAMU_FILES, FAHAMU_REPO  # noqa: F401  (one place for the names: circuitloc.plan.config.hub)
from circuitloc.tasks.common import (
    read_text,
)

RESOURCES = shipped.resources() / "ioi"
FAHAMU_COLUMN = "ioi_sentences"
ROWS = {"prompt": pl.String, "io": pl.String, "s": pl.String, "order": pl.String, "template": pl.Int64}


def resource_lines(path: Path) -> list[str]:
    return [ln.strip() for ln in read_text(path, "IOI resource file").splitlines()
            if ln.strip() and not ln.startswith("#")]


def template_order(template: str) -> str:
    """ABBA when the indirect object is named first, BABA when the subject is."""
    return "ABBA" if template.index("{IO}") < template.index("{S}") else "BABA"


def load_templates(root=None) -> list[str]:
    """fahamu/ioi's 30 templates, checked: one {IO}, two {S}, and both orders present."""
    path = (Path(root) if root else RESOURCES) / "templates.txt"
    templates = resource_lines(path)
    for t in templates:
        if t.count("{IO}") != 1 or t.count("{S}") != 2:
            raise DatasetError(f"{path}: a template needs one {{IO}} and two {{S}}: {t!r}")
    if {template_order(t) for t in templates} != {"ABBA", "BABA"}:
        raise DatasetError(f"{path}: needs ABBA templates ({{IO}} first) and BABA templates ({{S}} first)")
    return templates


def fill(template: str, io: str, s: str, place: str, obj: str) -> str:
    return (template.replace("{IO}", io).replace("{S}", s).replace("{PLACE}", place)
            .replace("{OBJECT}", obj))


def load_resources(root=None) -> dict[str, list[str]]:
    root = Path(root) if root else RESOURCES
    return {"templates": load_templates(root), **{k: resource_lines(root / f"{k}.txt") for k in ("names", "places", "objects")}}
