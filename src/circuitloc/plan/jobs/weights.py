"""Weights a finished run lost, rebuilt by a plain rerun. A toy's or a GGUF model's weights are a
directory() output of the model job beside its card, and Snakemake looks no further than the
directory: a weights file deleted (or truncated) inside it plans nothing, and the next job that
loads the model fails on the card's check. So while the run is planned, each such model whose card
exists is compared with its weights folder by the card's own record (each file's name and size; no
hashing: free), and a model whose folder lacks a file or holds one of another size has its card
forced (as by Snakemake's --forcerun of that card: the model and what depends on it run again). A
corrupt file of the right size is still found by the loading job's sha256 check, with its hint.
Standard library only (the plan wing)."""

from __future__ import annotations

import json
import os
import sys

from circuitloc.plan import paths
from circuitloc.plan.config import views


def lost_weights(config) -> list[tuple[str, str]]:
    """(card path, why) of every model with weights of its own (toy, gguf) whose card exists and whose
    weights folder lacks a file the card lists or holds one of another size. A card that does not
    read as JSON with a weights record is left to the jobs (they name it)."""
    out = []
    for model in views.models(config):
        if views.model_spec(config, model).get("source") == "hf":
            continue  # its weights are the hub cache's or the user's folder: the card's revision names them
        card, folder = paths.CARD.format(model=model), paths.WEIGHTS.format(model=model)
        try:
            with open(card, encoding="utf-8") as f:
                files = json.load(f)["weights"]["files"]
            listed = [(name, int(want["bytes"])) for name, want in files.items()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        for name, size in listed:
            f = os.path.join(folder, name)
            if not os.path.isfile(f):
                out.append((card, f"its weights file {f} is missing"))
                break
            if os.path.getsize(f) != size:
                out.append((card, f"its weights file {f} has {os.path.getsize(f)} bytes, its card says {size}"))
                break
    return out


class LostWeights:
    """The models whose weights a finished run lost (`lost_weights`), found while the Snakefile is
    parsed, in the run's own process only (a job's process replans nothing), each said on the
    console. `force(model)`, called from the model rule's input function while Snakemake builds its
    DAG, adds a lost model's card to the DAG's forced files: what `--forcerun <card>` does, so the
    model and what depends on it run again. Not at parse time: Snakemake parses the Snakefile before
    it assigns the run's DAG settings and reads their forcerun, so a card added there is lost."""

    def __init__(self, workflow, config, stream=None):
        self.workflow = workflow
        self.cards = dict(lost_weights(config)) if getattr(workflow, "is_main_process", False) else {}
        for card, why in self.cards.items():
            print(f"circuitloc: {card}: {why}; the model is rebuilt, and what depends on it",
                  file=stream or sys.stderr)

    def force(self, model: str) -> bool:
        """Force the card of `model` if it lost weights; whether it did."""
        card = paths.CARD.format(model=model)
        forced = getattr(getattr(self.workflow, "dag", None), "forcefiles", None)
        if card not in self.cards or not isinstance(forced, set):
            return False
        forced.add(card)
        return True
