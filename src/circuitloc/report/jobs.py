"""A table or figure job's settings and files as typed records, built once by its script from the
rule's wildcards, params and outputs, so the writers and figures take a record each instead of a
bundle of keyword arguments. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableJob:
    """What a table or figure job of one task and ablation is told by its rule: `threshold` (config
    curves.threshold: heads-to-threshold) and `min_heldout` (the task's curves.min_heldout: fewer
    held-out prompts carry no damage percentage)."""

    task: str
    ablation: str
    threshold: float = 0.8
    min_heldout: int = 0

    @classmethod
    def from_rule(cls, wildcards, params: dict) -> TableJob:
        return cls(wildcards.task, wildcards.ablation, float(params.get("threshold", 0.8)),
                   int(params.get("min_heldout") or 0))


@dataclass(frozen=True)
class TableFiles:
    """A table's two files: CSV and markdown."""

    csv: str
    md: str


@dataclass(frozen=True)
class FigureFiles:
    """A figure's two files: PNG and PDF."""

    png: str
    pdf: str


@dataclass(frozen=True)
class SweepStats:
    """How the sweep's seeds are summarised: `ci` of the t-intervals, `alpha` and `p_adjust` (holm or
    bh) of the paired tests (config sweep:, defaults in config/schema.yaml)."""

    ci: float
    alpha: float
    p_adjust: str
