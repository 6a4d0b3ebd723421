"""The vocabulary's types, as plain data: ablation kinds and units, unit labels, metric floors,
stability splits, `KindSpec` and `TaskSpec`, and the headline. Standard library only, so the
Snakefile, the rules and the table and figure jobs read the same definitions as the engine without
importing torch. The built-in tasks are in `circuitloc.plan.vocabulary.builtin_tasks`; the registry of every
task and kind (built-in and a config's `task_modules`) is `circuitloc.plan.vocabulary.catalog`; defaults live
in config/schema.yaml."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

# the vocabulary's unit words, handed on: one import for its users
from circuitloc.plan.vocabulary.labels import KV, LABEL_FORMAT, LAYER, QUERY, TOP_COLUMN, UNIT_LABEL, UNITS, unit_kind, unit_label  # noqa: F401,E501

# ---- ablation kinds and units ----------------------------------------------------------------------
# zero: the unit's output set to zero (the paper's); mean: its mean output over the task set;
# resample: its output on another prompt of the set. A unit is a query head, a kv group (every query
# head that shares one key/value head) or a layer (every query head of one layer).
KIND_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # no '-': an ablation is named kind-unit


@dataclass(frozen=True)
class KindSpec:
    """An ablation kind, the one registration of it: its name, and where its replacement builder
    lives as "module:function" (imported only by the job that runs the kind, so the plan knows every
    kind without importing torch). The builder takes one `engine.replacement.ReplacementContext` and
    returns (replacement, share of prompts aligned); None: the unit outputs zero (the engine's
    default, nothing to build)."""

    name: str
    builder: str | None = None


BUILTIN_KINDS = (
    KindSpec("zero"),
    KindSpec("mean", "circuitloc.engine.replacement:for_mean"),
    KindSpec("resample", "circuitloc.engine.replacement:for_resample"),
)
ZERO, MEAN, RESAMPLE = (k.name for k in BUILTIN_KINDS)


# ---- tasks -----------------------------------------------------------------------------------------
# what a metric is when the task is gone: 0 (a logit difference, accuracy, the facts margin), each
# prompt's own value (induction: the loss without the repeat), or -log(vocabulary) (a uniform guess)
FLOORS = ("zero", "per_prompt", "log_vocab")
FLOOR_ZERO, FLOOR_PER_PROMPT, FLOOR_LOG_VOCAB = FLOORS


@dataclass(frozen=True)
class Split:
    """One stability split of a task's scoring prompts into two conditions: by a dataset column's
    value (`column`: a == `value`), or below/above the median of the clean metric (`by: clean`) or
    of the prompt length (`by: length`)."""

    name: str
    a: str
    b: str
    by: str = "column"  # column | clean | length
    column: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class TaskSpec:
    """What the workflow and the tables need to know about a task. Its behaviour — `build_dataset`,
    the metric functions, optionally `floor_per_prompt(job)` and `unit_columns(job)`, and
    `shared_dataset(model, frames, n_score)` for a task with a family-shared condition — is in
    `module` (see circuitloc.tasks.registry for the interface)."""

    name: str
    module: str  # the module holding the task's behaviour
    metrics: tuple  # metric names; the first is the default (config tasks.<name>.metric chooses)
    higher_is_better: bool  # of every one of its metrics
    fields: tuple  # dataset columns the metric reads, beside input_ids and score
    job_columns: tuple = ()  # more dataset columns a score or curve job reads (the floor's inputs)
    align: tuple = ()  # prompts equal in these columns (and in length) share token positions
    floors: dict = field(default_factory=dict)  # metric -> zero | per_prompt | log_vocab (default zero)
    sign_flip: bool = False  # Table 2 says whether the top unit alone flips the metric's sign
    splits: tuple = ()  # stability splits of the scoring prompts (Split)
    # the family-shared condition: the name of the task of the prompts every model of a family has
    # (facts: facts_shared); its spec is this one's under that name (`shared_spec`)
    shared: str | None = None
    inputs: object = None  # fn(task config, resources dir) -> {key: file} the dataset job reads
    heatmap: tuple = (("drop", "single-unit drop"),)  # Figure 1's rows: (scores column, title)
    in_workflow: bool = True  # false: a helper task (neutral text) that no dataset rule builds
    base: str | None = None  # a derived task (facts_shared): the task whose behaviour it uses
    # the fewest held-out curve prompts a damage percentage may rest on (fewer: n/a in the tables);
    # config curves.min_heldout.<task> overrides it
    min_heldout: int = 20
    # metrics whose clean value on the curve prompts Table 1 reports too (`baseline_<metric>`) when the
    # task is ranked on another of its metrics (facts: top-1 accuracy beside the margin)
    baselines: tuple = ()
    # the sweep's paired tests read its damage capped at 100% (`metrics.capped_pct`): its metric can be
    # pushed past the task gone (facts' margin past the wrong answers), overshoot, not more concentration
    capped: bool = False

    def floor(self, metric: str | None = None) -> str:
        return self.floors.get(metric or self.metrics[0], FLOOR_ZERO)

    def metric(self, name: str | None = None) -> str:
        """The metric a table or job uses: `name` (a config's choice) or the default; a name the
        task does not have is an error."""
        if name is None:
            return self.metrics[0]
        if name not in self.metrics:
            field = f"tasks.{self.base or self.name}.metric"
            raise ValueError(f"{field} must be one of {', '.join(self.metrics)} (the metrics of task {self.name}), "
                             f"got {name!r}")
        return name


def shared_spec(spec: TaskSpec) -> TaskSpec:
    """The spec of `spec`'s family-shared condition: the same task (module, metrics, columns) under
    the condition's name, built from the task's datasets rather than from resource files."""
    return replace(spec, name=spec.shared, shared=None, base=spec.name, inputs=None)


HEADLINE = ("ioi", "zero-query")  # what a report leads with: the paper's task under its measure
