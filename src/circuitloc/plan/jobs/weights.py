"""Weights a finished run lost, rebuilt by a plain rerun, and nothing after them rerun for it.

A toy's or a GGUF model's weights are a directory() output of the model job beside its card, and
Snakemake looks no further than the directory: a weights file deleted (or truncated) inside it plans
nothing, and the next job that loads the model fails on the card's check. So while the Snakefile is
parsed (the run's own process only), each such model whose card exists is compared with its weights
folder by the card's own record (each file's name and size; no hashing: free); a model whose folder
is gone, lacks a file or holds one of another size is "rebuilt":

- its job is rule `model_rebuilt`'s (rules/models.smk), rule model's job with one more output, a
  marker file that the default target asks for (`markers`): Snakemake's own check (a missing output
  a target needs) plans it, in a dry run too, with no private part of Snakemake touched. The run
  removes the markers at its end, and a marker a killed run left is removed while the plan is made
  (one left would make the job look done). A run of other targets leaves the weights as they are (a job that
  loads them stops on the card's check, with a hint that rebuilds them);
- every job that reads its card reads it as `ancient()` (`LostWeights.keep`), so Snakemake does not
  rerun them because the model job runs: the card records only what determines the model (no
  timings), so a rebuild writes the same bytes. On the next run Snakemake sees the card newer than
  their outputs but with the checksum it recorded, and reruns nothing either; a card that came back
  with other bytes (its settings were changed in the same run) fails that checksum, so the next plain
  run reruns what reads it, and this run says so at its end (`LostWeights.changed`).

A corrupt file of the right size is still found by the loading job's sha256 check, with its hint.
Standard library only (the plan wing)."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys

from circuitloc.plan import paths
from circuitloc.plan.config import views
from circuitloc.usercommand import command_with

# the marker of a model rebuilt for weights a finished run lost (rule model_rebuilt's output). Here, not
# in plan.paths: no job imports this module, so it is in no job's code hash
REBUILT = f"{paths.RESULTS}/models/{{model}}/rebuilt"


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


def _sha256(path) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


class LostWeights:
    """The models whose weights a finished run lost (`lost_weights`), found while the Snakefile is
    parsed, in the run's own process only, each said on the console, with their cards' sha256 as
    they are now (`changed` compares them at the run's end)."""

    REBUILT = REBUILT

    def __init__(self, workflow, config, stream=None):
        main = getattr(workflow, "is_main_process", False)
        self.config, self.stream = config, stream
        self.cards = dict(lost_weights(config)) if main else {}
        self.before = {card: _sha256(card) for card in self.cards}
        self.main = main
        for card, why in self.cards.items():
            self._say(f"{card}: {why}; the model is rebuilt (what reads its card reruns only if it changes)")
        self._remove_markers()
        if self.cards:
            atexit.register(self.end)

    def _say(self, line):
        print(f"circuitloc: {line}", file=self.stream or sys.stderr)

    def pattern(self, rebuilt: bool) -> str:
        """The wildcard pattern of rule model (`rebuilt` False: the models with weights of their own
        but those rebuilt) or of rule model_rebuilt (True: those rebuilt). In a job's own process
        (which replans nothing) both match every such model, and rule model comes first
        (rules/models.smk's ruleorder), so a job submitted as model_rebuilt is still found."""
        own = [m for m in views.models(self.config) if views.model_spec(self.config, m).get("source") != "hf"]
        if not self.main:
            return views.one_of(own)
        lost = [m for m in own if paths.CARD.format(model=m) in self.cards]
        return views.one_of(lost if rebuilt else [m for m in own if m not in lost])

    def markers(self) -> list[str]:
        """The marker of every rebuilt model (rule model_rebuilt's output): the default target asks
        for them."""
        return [REBUILT.format(model=m) for m in views.models(self.config)
                if paths.CARD.format(model=m) in self.cards]

    def keep(self, files, ancient):
        """`files` (a path, a list of them, a dict of either, or an input function returning one)
        with the card of every rebuilt model marked by `ancient` (Snakemake's): what reads it is not
        rerun because its model job runs. A pattern with `{model}` becomes an input function."""
        if callable(files):
            return lambda wc: self.keep(files(wc), ancient)
        if isinstance(files, str) and "{model}" in files:
            return lambda wc: self.keep(files.format(model=wc.model), ancient)
        if isinstance(files, dict):
            return {k: self.keep(v, ancient) for k, v in files.items()}
        if isinstance(files, list | tuple):
            return [self.keep(f, ancient) for f in files]
        return ancient(files) if files in self.cards else files

    def _remove_markers(self):
        for marker in self.markers():
            if os.path.isfile(marker):
                os.remove(marker)

    def end(self) -> list[str]:
        """At the run's end: the markers removed, and the rebuilt cards that changed said (`changed`)."""
        self._remove_markers()
        return self.changed()

    def changed(self) -> list[str]:
        """At the run's end: the rebuilt cards whose bytes are not those the run started with (each
        said on the console, with the command that reruns what reads them); none after a dry run."""
        out = [card for card, sha in self.before.items() if _sha256(card) not in (sha, None)]
        for card in out:
            self._say(f"{card}: rebuilt with other contents; what reads it was not rerun in this run, "
                      f"the next plain run reruns it: {command_with() or 'the same command'}")
        return out
