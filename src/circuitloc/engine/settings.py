"""A job's settings as one typed record, built once by its script from the rule's params: every
stage (`pipeline`, `datasets`) and `job.AblationJob` reads this record, so a new setting is one
field here instead of one more keyword passed through every call. Beside it, the files of one
ablation (inputs and outputs). Standard library only (and the card's record, circuitloc.modelcard,
the plan's checks, plan.config.checks, and its score defaults, plan.config.views): a script builds it before torch
loads.

Every default of a curve or score key is written once: the schema's `default:` (config/schema.yaml:
greedy_candidates, greedy_steps, control_draws, prompts; the curve job requires them),
`plan.config.views.CURVE_DEFAULTS` (the curve keys the schema gives none, so that a run's job params stay
what they were) or `plan.config.views.SCORE_DEFAULTS` (scores.*). tests/unit/test_threshold.py finds a
second one."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from circuitloc.modelcard import ModelCard
from circuitloc.plan.config.checks import min_audit, stop_problem
from circuitloc.plan.config.views import CURVE_DEFAULTS, MIN_TOP, SCORE_DEFAULTS
from circuitloc.stats import Bootstrap


@dataclass(frozen=True)
class CurveSettings:
    """A curve job's curve config (config `curves`, the model's overrides, the task's `n_curve`):
    `methods` (ranked, greedy), `max_steps`, `control_draws` (random control draws), `prompts`
    (heldout or all), `n_curve` (None: every curve prompt), and greedy's plan (`greedy_candidates`,
    `greedy_steps`, `greedy_stop_damage`; needed only where `methods` has greedy), and whether
    attribution guides it (`greedy_guided`: None, every candidate run exactly; c, only the c best by
    attribution; `greedy_audit`: share of steps whose whole pool also runs; `greedy_attribution`:
    linear or ig, with `ig_steps`), or a screen does (`greedy_screen`: None, off; n, every candidate
    run on n of the selection prompts and its best `greedy_recheck` on all of them), the ranked curve's early stop (`ranked_stop_damage`, None:
    never; `ranked_stop_patience` steps), and whether MIB's sufficiency curve runs (`sufficiency`:
    ~10 forward passes from layer 0 a curve; only CPR and CMD read it, no paper table).

    A key the config leaves out (or sets to null) takes its field's default: `plan.config.views.CURVE_DEFAULTS`
    for the keys the schema gives no default."""

    methods: tuple[str, ...]
    max_steps: int
    control_draws: int
    prompts: str
    n_curve: int | None = None
    greedy_candidates: int | None = None
    greedy_steps: int | None = None
    greedy_stop_damage: float | None = CURVE_DEFAULTS["greedy_stop_damage"]
    greedy_guided: int | None = CURVE_DEFAULTS["greedy_guided"]
    greedy_audit: float = CURVE_DEFAULTS["greedy_audit"]
    greedy_attribution: str = CURVE_DEFAULTS["greedy_attribution"]
    ig_steps: int = CURVE_DEFAULTS["ig_steps"]
    greedy_screen: int | None = CURVE_DEFAULTS["greedy_screen"]
    greedy_recheck: int = CURVE_DEFAULTS["greedy_recheck"]
    ranked_stop_damage: float | None = CURVE_DEFAULTS["ranked_stop_damage"]
    ranked_stop_patience: int = CURVE_DEFAULTS["ranked_stop_patience"]
    sufficiency: bool = CURVE_DEFAULTS["sufficiency"]

    @classmethod
    def of(cls, cfg: dict) -> CurveSettings:
        """From the rule's curve config; keys other stages read (threshold, min_heldout) are not the
        curve job's. A missing key is a one-line error naming it."""
        need = ("methods", "max_steps", "control_draws", "prompts")
        need += ("greedy_candidates", "greedy_steps") if "greedy" in cfg.get("methods", ()) else ()
        missing = [k for k in need if k not in cfg]
        if missing:
            raise ValueError(f"curve config lacks {', '.join(missing)} (config curves)")
        problem = stop_problem(cfg)
        if problem:
            raise ValueError(problem)
        return cls(methods=tuple(cfg["methods"]), max_steps=int(cfg["max_steps"]),
                   control_draws=int(cfg["control_draws"]), prompts=str(cfg["prompts"]),
                   n_curve=int(cfg["n_curve"]) if cfg.get("n_curve") else None,
                   **{k: cast(cfg[k]) for k, cast in OPTIONAL.items() if cfg.get(k) is not None})

    def greedy(self, label: str) -> Greedy:
        """The greedy curve's plan from these settings; `label`: the job's name in its log lines."""
        return Greedy(candidates=self.greedy_candidates, steps=self.greedy_steps, stop_damage=self.greedy_stop_damage,
                      label=label, guided=self.greedy_guided, audit=self.greedy_audit,
                      attribution=self.greedy_attribution, ig_steps=self.ig_steps, screen=self.greedy_screen,
                      recheck=self.greedy_recheck)

    def ranked(self, units: int) -> RankedPlan:
        """The ranked curve's plan over `units` ranked units (at most max_steps steps)."""
        return RankedPlan(min(self.max_steps, units), self.ranked_stop_damage, self.ranked_stop_patience)


# the curve keys a curve config may leave out or set to null (CurveSettings.of keeps the field's
# default), each with how its value is read
OPTIONAL = {"greedy_candidates": int, "greedy_steps": int, "greedy_stop_damage": lambda v: v, "greedy_guided": int,
            "greedy_audit": float, "greedy_attribution": str, "ig_steps": int, "greedy_screen": int, "greedy_recheck": int, "ranked_stop_damage": float,
            "ranked_stop_patience": int, "sufficiency": bool}


ATTRIBUTIONS = ("linear", "ig")


@dataclass(frozen=True)
class Greedy:
    """A greedy curve's plan (`CurveSettings.greedy`; engine.greedy runs it). `guided`: None runs every
    candidate exactly; c runs the c best by attribution, and then needs `audit` (the share of guided
    steps on which the whole pool is run too) and `attribution` (linear, one gradient, or ig with
    `ig_steps`). `screen`: None, or n: each step runs the pool on n of the selection prompts (evenly
    spaced) and its best `recheck` on all of them, the exact engine picking among those, audited as a
    guided step is (the two shortcuts exclude each other). No defaults of config keys here: CurveSettings holds them."""

    candidates: int
    steps: int
    stop_damage: float | None = None
    label: str = "greedy curve"  # the job's name in its log lines
    guided: int | None = None
    audit: float | None = None
    attribution: str | None = None
    ig_steps: int | None = None
    screen: int | None = None
    recheck: int | None = None

    def __post_init__(self):
        if self.screen is not None and (self.guided is not None or self.recheck is None or self.audit is None):
            raise ValueError("a screened greedy plan needs its recheck count and audit share, and no guided count "
                             "(config curves: greedy_screen or greedy_guided, not both)")
        if self.guided is not None and (self.audit is None or self.attribution is None):
            raise ValueError("a guided greedy plan needs its audit share and attribution (config curves)")
        if self.attribution is not None and self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"greedy attribution {self.attribution!r}: expected one of {', '.join(ATTRIBUTIONS)}")
        if self.attribution == "ig" and self.ig_steps is None:
            raise ValueError("greedy attribution ig needs ig_steps (config curves)")
        if self.audit is not None and not 0.0 <= self.audit <= 1.0:
            raise ValueError(f"greedy audit share {self.audit}: expected a share between 0 and 1")

    @property
    def shortlist(self) -> int | None:
        """How many candidates a step runs exactly on all the selection prompts (guided or screened);
        None: all of them."""
        return self.guided if self.guided is not None else self.recheck if self.screen is not None else None

    def audited(self, step: int) -> bool:
        """Whether the 0-based `step` is audited: ceil(audit * n) of the first n steps, evenly
        spaced and starting at the first (the most damaging), the same on every run."""
        return self.shortlist is not None and math.ceil(step * self.audit) < math.ceil((step + 1) * self.audit)


@dataclass(frozen=True)
class RankedPlan:
    """A ranked curve's plan (`CurveSettings.ranked`; engine.ablation.ranked_curve runs it): it stops
    once `stop_patience` consecutive steps reach `stop_damage` (None: never)."""

    max_steps: int
    stop_damage: float | None = None
    stop_patience: int | None = None  # needed with stop_damage

    def __post_init__(self):
        if self.stop_damage is not None and self.stop_patience is None:
            raise ValueError("a ranked curve's stop needs its patience (config curves.ranked_stop_patience)")

    def stop_note(self) -> str:
        return f"damage >= {self.stop_damage:g} for {self.stop_patience} consecutive steps"


SCORE_METHODS = ("exact", "guided")


@dataclass(frozen=True)
class ScoreSettings:
    """How a score job scores every unit (config `scores`, the model's overrides): `method` exact
    (every unit ablated alone, the default) or guided (`engine.guided_scan`: attribution proposes,
    `audit` units drawn at random calibrate a bound at miss probability `level`, and only units
    whose bound can reach the `top` units the curves rely on are scored exactly); `batch`: units
    per exact run of a guided scan."""

    method: str = SCORE_DEFAULTS["method"]
    audit: int = SCORE_DEFAULTS["audit"]
    level: float = SCORE_DEFAULTS["level"]
    top: int = MIN_TOP
    batch: int = 16

    def __post_init__(self):
        if self.method not in SCORE_METHODS:
            raise ValueError(f"scores.method {self.method!r}: expected one of {', '.join(SCORE_METHODS)}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"scores.level {self.level}: expected a probability between 0 and 1")
        if self.audit < min_audit(self.level):
            raise ValueError(f"scores.audit {self.audit} is below {min_audit(self.level)}, the fewest audited "
                             f"units at which scores.level {self.level} gives a finite bound")
        if self.top < 1 or self.batch < 1:
            raise ValueError(f"scores.top {self.top} and batch {self.batch}: expected at least 1")

    @classmethod
    def of(cls, block: dict | None) -> ScoreSettings:
        """From a rule's opts `scores` block (absent: exact, today's scan; a key it leaves out: the
        field's default)."""
        if not block:
            return cls()
        casts = {"method": str, "audit": int, "level": float, "top": int, "batch": int}
        return cls(**{k: cast(block[k]) for k, cast in casts.items() if k in block})


@dataclass(frozen=True)
class JobSettings:
    """What a dataset, score, curve or specificity job is told by its rule.

    `task`: the task whose prompts it runs (a specificity job: each task in turn, `for_task`);
    `card`: the model card; `batch_tokens`: config max_batch_tokens; `metric`: the ranked metric
    (config tasks.<task>.metric; None: the spec's default), `metrics` the same per task (specificity);
    `min_group`: config ablation.min_group (mean and resample); `seed`: the run's seed (resample
    pairs, control draws, dataset sampling, torch); `bootstrap`: intervals over prompts (None: none);
    `curves`: a curve job's curve config (config curves, the model's overrides and the task's n_curve);
    `scores`: how a score job scores the units (`ScoreSettings`, from opts `scores`; exact where absent)."""

    card: ModelCard
    batch_tokens: int | str  # or 'auto' (engine.budget)
    task: str | None = None
    device: str = "cpu"
    metric: str | None = None
    metrics: dict = field(default_factory=dict)
    min_group: int | None = None
    seed: int = 0
    bootstrap: Bootstrap | None = None
    curves: CurveSettings | None = None
    scores: ScoreSettings = field(default_factory=ScoreSettings)

    @classmethod
    def from_params(cls, params: dict, card: ModelCard, task: str | None = None,
                    curves: dict | None = None) -> JobSettings:
        """From a rule's params (batch_tokens, device and, where the rule has them, opts = {min_group,
        seed}, seed, metric, metrics, bootstrap): the one place a rule's param names meet the engine.
        `curves`: a curve job's curve config (its rule's `cfg`; a dataset rule's `cfg` is another)."""
        opts = params.get("opts") or {}
        seeds = {int(s) for s in (params.get("seed"), opts.get("seed")) if s is not None}
        if len(seeds) > 1:
            raise ValueError(f"a job got two seeds {sorted(seeds)} (params seed and opts seed): one run has one seed")
        return cls(card=card, batch_tokens=_tokens(params["batch_tokens"]), task=task,
                   device=str(params.get("device") or "cpu"), metric=params.get("metric"),
                   metrics=dict(params.get("metrics") or {}),
                   min_group=int(opts["min_group"]) if opts.get("min_group") is not None else None,
                   seed=seeds.pop() if seeds else 0, bootstrap=Bootstrap.of(params.get("bootstrap")),
                   curves=CurveSettings.of(curves) if curves is not None else None,
                   scores=ScoreSettings.of(opts.get("scores")))

    def for_task(self, task: str) -> JobSettings:
        """The same job on another task's prompts, ranked on that task's metric (`metrics`)."""
        return dataclasses.replace(self, task=task, metric=self.metrics.get(task))


@dataclass(frozen=True)
class ScoreFiles:
    """A score job's outputs for one ablation: the scores table and the per-prompt metric."""

    scores: str
    prompts: str

    def outputs(self) -> list:
        return [self.scores, self.prompts]


@dataclass(frozen=True)
class CurveFiles:
    """A curve job's files for one ablation: the scores table it ranks by (input), the curve and
    its random control (outputs)."""

    scores: str
    curve: str
    control: str

    def outputs(self) -> list:
        return [self.curve, self.control]


@dataclass(frozen=True)
class SpecificityFiles:
    """A specificity job's files: {task: dataset} and {task: scores table} of one model and
    ablation, the neutral text and the output table."""

    datasets: dict
    scores: dict
    neutral: str
    out: str

    def outputs(self) -> list:
        return [self.out]


def _tokens(value) -> int | str:
    """max_batch_tokens as a job reads it: a number, or 'auto' (sized when the scanner is built)."""
    return value if value == "auto" else int(value)
