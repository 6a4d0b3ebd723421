"""A table or figure job's settings and files as typed records, built once by its script from the
rule's wildcards, params and outputs, so the writers and figures take a record each instead of a
bundle of keyword arguments. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field

from circuitloc.plan.vocabulary.labels import QUERY, UNITS
from circuitloc.plan.vocabulary.vocab import ZERO


@dataclass(frozen=True)
class TableJob:
    """What a table or figure job of one task and ablation is told by its rule: `threshold` (config
    curves.threshold: heads-to-threshold; None for a job that reads no heads-to, which then fails
    loudly if it asks) and `min_heldout` (the task's curves.min_heldout: fewer held-out prompts carry
    no damage percentage)."""

    task: str
    ablation: str
    threshold: float | None = None
    min_heldout: int = 0
    ci: float = 0.95  # the bootstrap intervals' level (config bootstrap.ci): Table 2's control adjustment reads it

    @classmethod
    def from_rule(cls, wildcards, params: dict, ablation: str | None = None) -> TableJob:
        """`ablation`: one of a per-task job's ablations (its rule has no ablation wildcard)."""
        threshold = params.get("threshold")
        return cls(wildcards.task, ablation or wildcards.ablation, None if threshold is None else float(threshold),
                   int(params.get("min_heldout") or 0), float(params.get("ci") or cls.ci))


def by_model(inputs, kind: str, i: int, models: list) -> dict:
    """{model: file} of a per-task job's input `{kind}_{i}` (plan.jobs.targets.per_ablation_inputs: one
    list per kind and ablation position, in the order of that ablation's `models`)."""
    return dict(zip(models, inputs[f"{kind}_{i}"]))


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


# the measures a sweep's paired table tests, by the names `sweep.primary.measures` uses
SWEEP_MEASURES = ("top_head", "curve_area", "cpr", "cmd", "heads_to_ranked", "heads_to_greedy")


@dataclass(frozen=True)
class Primary:
    """The sweep's primary family: these measures under these units and ablation kinds, every task and
    size (config `sweep.primary`); every other test is exploratory and adjusted on its own."""

    units: tuple = (QUERY,)
    measures: tuple = ("top_head", "heads_to_greedy")
    kinds: tuple = (ZERO,)  # the paper's ablation; the overview says whether a verdict holds under the others

    def __post_init__(self):
        bad = [u for u in self.units if u not in UNITS] + [m for m in self.measures if m not in SWEEP_MEASURES]
        if bad:
            raise ValueError(f"sweep.primary: unknown {', '.join(map(repr, bad))} (units {', '.join(UNITS)}; "
                             f"measures {', '.join(SWEEP_MEASURES)})")


@dataclass(frozen=True)
class SweepStats:
    """How the sweep's seeds are summarised and tested: `ci` of the t-intervals, `alpha` and
    `p_adjust` (holm or bh) of the paired tests, `primary` their primary family (config sweep:,
    defaults in config/schema.yaml)."""

    ci: float = 0.95
    alpha: float = 0.05
    p_adjust: str = "holm"
    primary: Primary = field(default_factory=Primary)

    @classmethod
    def of(cls, opts: dict | None, ci: float | None = None) -> SweepStats:
        """From the rules' `stats` params ({alpha, p_adjust, primary}); a missing key keeps its default."""
        o = {k: v for k, v in (opts or {}).items() if v is not None}
        pr = o.get("primary") or {}
        return cls(ci=float(ci if ci is not None else o.get("ci", cls.ci)), alpha=float(o.get("alpha", cls.alpha)),
                   p_adjust=str(o.get("p_adjust", cls.p_adjust)),
                   primary=Primary(tuple(pr.get("units", Primary.units)), tuple(pr.get("measures", Primary.measures)),
                                   tuple(pr.get("kinds", Primary.kinds))))


@dataclass(frozen=True)
class SweepInputs:
    """What a sweep table job reads: its Table 1, the models' cards and sweep meta, and for a kv
    ablation its layer twin's Table 1 (None elsewhere)."""

    table1: str
    cards: dict
    meta: dict
    layer_table1: str | None = None
