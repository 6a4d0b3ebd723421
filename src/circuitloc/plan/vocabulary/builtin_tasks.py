"""The tasks circuitloc ships, as data: each one's `TaskSpec` and the function naming the resource
files its dataset job reads. A task's behaviour (dataset builder, metrics, floor) lives in its
module (`TaskSpec.module`); a task of your own is a module named in config `task_modules`
(circuitloc.plan.vocabulary.catalog). Standard library only."""

from __future__ import annotations

import os

from circuitloc.plan.config import hub  # the fahamu/ioi file names and their resolution (standard library only)
from circuitloc.plan.vocabulary.vocab import Split, TaskSpec, shared_spec

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
             inputs=facts_inputs, baselines=("accuracy",), capped=True),
    # plain next-token loss on windows of a neutral text (specificity; b_id = the next token)
    TaskSpec("neutral", "circuitloc.tasks.induction", ("loss",), False, ("b_id",), align=("length",),
             in_workflow=False),
) for s in ((t, shared_spec(t)) if t.shared else (t,)))
NEUTRAL = "neutral"  # the specificity control's task
