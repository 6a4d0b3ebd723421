"""Unit scores in MIB's node-importance form, so a ranking of this pipeline can be evaluated by MIB's
circuit track (hannamw/MIB-circuit-track, `run_evaluation.py --level node --circuit-files ...`) and
set beside its baselines.

The form is what `Graph.from_json` (EAP-IG, which MIB's evaluation loads) reads: {"cfg": {n_layers,
n_heads, parallel_attn_mlp, d_model}, "nodes": {name: {"in_graph", "score"}}, "edges": {}}. Nodes are
named as MIB names them: `input`, `a{layer}.h{head}` (an attention head; query heads, as MIB
ungroups grouped-query attention), `m{layer}` (an MLP), `logits`. Only attention heads carry a
score: MIB keeps every unscored node in the circuit and counts only the scored ones when it turns a
fraction into a number of nodes, which is our setting (only the ablation's units are ever ablated).

A score is the unit's drop on the scoring prompts (the ranking every curve uses). A kv group's or a
layer's score is given to each of its query heads, since MIB has no node for either: MIB then counts
query heads, not groups, and breaks ties within a group in its own order. Beside the keys MIB reads,
`circuitloc` says what was scored (model, task, ablation, unit, metric and each unit's query heads)."""

from __future__ import annotations

import polars as pl

from circuitloc import io
from circuitloc import metrics
from circuitloc.metrics import rank
from circuitloc.modelcard import ModelCard
from circuitloc.report.records import TableJob

# a parallel attention/MLP block (each reads the same residual): the GPT-NeoX layout (Pythia) and GPT-J's
PARALLEL_ARCHITECTURES = ("GPTNeoXForCausalLM", "GPTJForCausalLM")


def node_importances(card: ModelCard, scores: pl.DataFrame, job: TableJob) -> dict:
    """One model's unit scores (a scores table) as MIB's node-importance JSON object."""
    ranked = rank(scores)
    score: dict[str, float] = {}
    units = {}
    for r in ranked.iter_rows(named=True):
        heads = [int(h) for h in r["heads"]]
        units[r["unit"]] = [f"a{int(r['layer'])}.h{h}" for h in heads]
        for name in units[r["unit"]]:
            score[name] = float(r["drop"])
    nodes: dict[str, dict] = {"input": {"in_graph": True}}
    for layer in range(int(card.n_layers)):
        for h in range(int(card.n_heads)):
            name = f"a{layer}.h{h}"
            nodes[name] = {"in_graph": True, **({"score": score[name]} if name in score else {})}
        nodes[f"m{layer}"] = {"in_graph": True}
    nodes["logits"] = {"in_graph": True}
    parallel = card.architecture in PARALLEL_ARCHITECTURES
    est = ranked.filter(pl.Series(metrics.estimated(ranked)))["unit"].to_list()  # a guided scan's estimates
    return {"cfg": {"n_layers": int(card.n_layers), "n_heads": int(card.n_heads),
                    "parallel_attn_mlp": bool(parallel), "d_model": int(card.d_model)},
            "nodes": nodes, "edges": {},
            "circuitloc": {"model": card.name, "task": job.task, "ablation": job.ablation,
                           "metric": str(scores["metric"][0]) if "metric" in scores.columns else None,
                           "score": "the unit's drop on the scoring prompts (clean - ablated; for a loss, "
                                    "ablated - clean): higher ranks first",
                           "units": units,
                           **({"estimated": est, "estimated_note": "these units' scores are attribution's "
                               "estimates (guided scan), not ablations"} if est else {})}}


def write_importances(job: TableJob, cards: dict, scores: dict, out_dir) -> None:
    """{out_dir}/{task}_{model}/importances.json for every model ({model: path} of cards and scores
    tables), MIB's layout of one folder per task and model; the directory is replaced whole."""
    with io.atomic_dir(out_dir) as tmp:
        for model, path in scores.items():
            card = ModelCard.read(cards[model])
            doc = node_importances(card, io.read_parquet(path, ("unit", "layer", "head", "heads", "drop"),
                                                         "scores table"), job)
            io.write_json(doc, tmp / f"{job.task}_{model}" / "importances.json")
