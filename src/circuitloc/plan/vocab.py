"""The words every layer of circuitloc shares, as plain data: tasks, ablation kinds and units, unit
labels, resource inputs. Standard library only, so the Snakefile, the rules and the table and figure jobs read the
same definitions as the engine without importing torch. Each task and each kind is registered here
once: a task's behaviour (dataset builder, metrics, floor) lives in its module (`TaskSpec.module`),
a kind's replacement builder in the function its `KindSpec.builder` names; defaults live in
config/schema.yaml."""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field, replace

from circuitloc.plan import hub  # the fahamu/ioi file names and their resolution (standard library only)

# the vocabulary's unit words, handed on: one import for its users
from circuitloc.plan.labels import KV, LABEL_FORMAT, LAYER, QUERY, TOP_COLUMN, UNIT_LABEL, UNITS, unit_kind, unit_label  # noqa: F401,E501

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
_KINDS: dict[str, KindSpec] = {k.name: k for k in BUILTIN_KINDS}


def register_kind(spec: KindSpec) -> KindSpec:
    """Add a kind defined outside circuitloc (its module's `KIND`); a name may not be reused by a
    different spec."""
    if not KIND_NAME.match(spec.name):
        raise ValueError(f"ablation kind name {spec.name!r}: lowercase letters, digits and _ only (no '-')")
    old = _KINDS.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"ablation kind {spec.name!r} is already defined (builder {old.builder})")
    _KINDS[spec.name] = spec
    return spec


def kinds() -> tuple[str, ...]:
    """Every registered kind's name, built-in first (the configured modules' kinds loaded)."""
    load_task_modules()
    return tuple(_KINDS)


def kind(name: str) -> KindSpec:
    """The spec of a kind by name; kinds of configured modules are loaded on first use."""
    if name not in _KINDS:
        load_task_modules()
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown ablation kind {name!r}: expected one of {', '.join(_KINDS)} "
                         f"(a kind of your own: its module in config task_modules)") from None


def parse_ablation(name: str) -> tuple[str, str]:
    """'zero-query' -> (zero, query); 'mean-kv' -> (mean, kv); a bare kind means query heads. An
    unknown kind or unit is an error, never a fallback."""
    kind_name, _, unit = str(name).partition("-")
    unit = unit or "query"
    if kind_name not in _KINDS:
        load_task_modules()
    if kind_name not in _KINDS or unit not in UNITS:
        raise ValueError(f"unknown ablation {name!r}: expected {'|'.join(_KINDS)}-{'|'.join(UNITS)} "
                         f"(a kind of your own: its module in config task_modules)")
    return kind_name, unit


def ablation_name(kind_name: str, unit: str) -> str:
    parse_ablation(f"{kind_name}-{unit}")
    return f"{kind_name}-{unit}"


def ablation_pattern() -> str:
    """A Snakemake wildcard constraint matching every registered kind-unit (call it after the
    config's modules are loaded)."""
    return f"({'|'.join(map(re.escape, kinds()))})-({'|'.join(UNITS)})"


# ---- resource files ----------------------------------------------------------------------------------
# Every file a dataset is computed from is an input of the job that reads it (editing it reruns that
# job). Keys are what the job's `inputs` dict calls them; paths are under the resources directory.
IOI_RESOURCES = {f"ioi_{k}": f"ioi/{k}.txt" for k in ("templates", "names", "places", "objects")}
FACTS_FILE = "facts/facts.tsv"
def ioi_inputs(cfg: dict, root: str) -> dict:
    """The generator's four files; or, for fahamu/ioi, the 30 templates, the places and objects (a
    sentence outside the templates gets its id from its skeleton) and a local parquet
    (`hub.local_fahamu`; a file from the hub is fetched inside the job)."""
    src = cfg.get("source") or {}
    if src.get("kind") != "fahamu":
        return {k: os.path.join(root, v) for k, v in IOI_RESOURCES.items()}
    out = {k: os.path.join(root, IOI_RESOURCES[k]) for k in ("ioi_templates", "ioi_places", "ioi_objects")}
    local = hub.local_fahamu(src)
    return {**out, "fahamu": local} if local else out


def facts_inputs(cfg: dict, root: str) -> dict:
    return {"facts": cfg.get("path") or os.path.join(root, FACTS_FILE)}


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


# each task once; a family-shared condition (facts_shared) follows the task that declares it
BUILTIN = tuple(s for t in (
    TaskSpec("ioi", "circuitloc.tasks.ioi", ("ld",), True, ("io_id", "s_id"), align=("template",),
             sign_flip=True, inputs=ioi_inputs,
             splits=(Split("template order", "ABBA", "BABA", "column", "order", "ABBA"),
                     Split("clean LD", "low LD", "high LD", "clean"))),
    TaskSpec("induction", "circuitloc.tasks.induction", ("icl_loss",), False, ("b_id",),
             job_columns=("norep_ids", "b_pos"), align=("prefix_len", "suffix_len"),
             floors={"icl_loss": "per_prompt"}, splits=(Split("sequence length", "short", "long", "length"),),
             heatmap=(("drop", "single-unit drop"), ("attn_score", "attention to B (ABA offset)"))),
    TaskSpec("facts", "circuitloc.tasks.facts", ("margin", "accuracy", "logprob"), True, ("answer_id",),
             align=("domain", "relation"), floors={"logprob": "log_vocab"}, shared="facts_shared",
             inputs=facts_inputs, baselines=("accuracy",)),
    # plain next-token loss on windows of a neutral text (specificity; b_id = the next token)
    TaskSpec("neutral", "circuitloc.tasks.induction", ("loss",), False, ("b_id",), align=("length",),
             in_workflow=False),
) for s in ((t, shared_spec(t)) if t.shared else (t,)))
_TASKS: dict[str, TaskSpec] = {t.name: t for t in BUILTIN}
NEUTRAL = "neutral"  # the specificity control's task
# modules outside circuitloc that define tasks or kinds (config `task_modules:`); the Snakefile sets it for jobs
TASK_MODULES_ENV = "CIRCUITLOC_TASK_MODULES"


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task defined outside circuitloc (its module's `SPEC`), and its family-shared condition
    where it declares one; a name may not be reused by a different spec."""
    specs = [spec, shared_spec(spec)] if spec.shared else [spec]
    for s in specs:
        old = _TASKS.get(s.name)
        if old is not None and old != s:
            raise ValueError(f"task {s.name!r} is already defined (by {old.module})")
    _TASKS.update((s.name, s) for s in specs)
    return spec


def load_task_modules(names=None) -> list[str]:
    """Import the modules named (default: the environment's CIRCUITLOC_TASK_MODULES, comma-separated)
    and register what each defines: a task (`SPEC`, a TaskSpec), an ablation kind (`KIND`, a
    KindSpec), or both. Returns the names of the tasks and kinds they define."""
    if names is None:
        names = [n for n in os.environ.get(TASK_MODULES_ENV, "").split(",") if n.strip()]
    out = []
    for name in names:
        module = importlib.import_module(name.strip())
        spec, kind_spec = getattr(module, "SPEC", None), getattr(module, "KIND", None)
        if not isinstance(spec, TaskSpec) and not isinstance(kind_spec, KindSpec):
            raise ValueError(f"task module {name!r} has neither SPEC (a circuitloc.plan.vocab.TaskSpec) "
                             "nor KIND (a circuitloc.plan.vocab.KindSpec)")
        if isinstance(spec, TaskSpec):
            if spec.shared and not callable(getattr(module, "shared_dataset", None)):
                raise ValueError(f"task module {name!r}: SPEC.shared names a family-shared condition "
                                 f"({spec.shared!r}) but the module has no shared_dataset(model, frames, n_score)")
            out.append(register(spec).name)
        if isinstance(kind_spec, KindSpec):
            out.append(register_kind(kind_spec).name)
    return out


def task_names() -> tuple[str, ...]:
    """Every registered task's name, built-in first (the configured modules' tasks loaded)."""
    load_task_modules()
    return tuple(_TASKS)


def task(name: str) -> TaskSpec:
    """The spec of a task by name; tasks of configured task modules are loaded on first use."""
    if name not in _TASKS:
        load_task_modules()
    try:
        return _TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}: expected one of {', '.join(sorted(_TASKS))} "
                         f"(a task of your own: its module in config task_modules)") from None


def dataset_inputs(name: str, cfg: dict, root: str) -> dict:
    """The files a dataset job of task `name` reads, by key (none for a task that reads none)."""
    spec = task(name)
    return spec.inputs(cfg, root) if spec.inputs else {}


def base_task(name: str) -> TaskSpec:
    """The task whose behaviour `name` uses (facts_shared: facts)."""
    spec = task(name)
    return task(spec.base) if spec.base else spec


def own_tasks() -> list[str]:
    """Every registered task a config may name under `tasks:` (not a derived or helper task)."""
    return [n for n, s in _TASKS.items() if s.in_workflow and not s.base]


def workflow_tasks(configured) -> list[str]:
    """The tasks a config asks for (keys of its `tasks:`), built-in order first, each checked."""
    names = list(configured)
    for n in names:
        spec = task(n)
        if not spec.in_workflow or spec.base:
            raise ValueError(f"config tasks.{n}: not a task of its own (use tasks.{spec.base or n})")
    builtin = [t.name for t in BUILTIN if t.name in names]
    return builtin + [n for n in names if n not in builtin]

HEADLINE = ("ioi", "zero-query")  # what a report leads with: the paper's task under its measure

