"""A model for the Python API: its card (what every stage reads about it) and, loaded once, the
weights the engine scans. Built by the workflow's own model stage (`models.build.build_model`), so a
card made here is the card a run would make."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path

from circuitloc import shipped
from circuitloc.engine.select import engine_of
from circuitloc.errors import ConfigError
from circuitloc.modelcard import ModelCard
from circuitloc.models.build import build_model
from circuitloc.models.load import load_engine
from circuitloc.plan import paths
from circuitloc.plan.config.configload import check_unknown_keys, load_schema, validate
from circuitloc.plan.config.workflow_config import SCHEMA

# the checkout (or an installed package's copy): the schema a model config block is checked against
ROOT = shipped.root()


@dataclass(eq=False)
class Model:
    """`card`: the model card (`modelcard.ModelCard`); `device`: where its weights run (cpu, cuda,
    mps). `loaded()` loads (plain model, tokenizer) on first use and keeps them. Compared and hashed
    by identity, so a model can key a dict (`circuitloc.plot_scores({model: scores})`)."""

    card: ModelCard
    device: str = "cpu"
    _loaded: tuple | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.card.name

    def loaded(self) -> tuple:
        """(the Hugging Face model, its tokenizer), loaded on first use (`models.load.load_engine`)."""
        if self._loaded is None:
            self._loaded = load_engine(self.card, self.device)
        return self._loaded


def spec_of(source) -> dict:
    """A model config block (`models.<name>` of a run config) for a source given as a string: a
    local .gguf file, a local Hugging Face directory, or a hub id (`org/name`)."""
    if isinstance(source, dict):
        return dict(source)
    text = os.fspath(source)
    if text.endswith(".gguf"):
        return {"source": "gguf", "gguf": {"path": text}}
    return {"source": "hf", "hf": text}


def check_block(name: str, spec: dict, who: str = "load_model") -> None:
    """A model config block checked as a run config's `models.<name>` is (unknown keys, the schema:
    a source, and the key that source reads): each problem one line of a ConfigError, named as in a
    config (`load_model: models.m: missing the required key 'hf'`), not a KeyError from the build."""
    schema = load_schema(ROOT / SCHEMA)
    sub = {"$defs": schema.get("$defs", {}), "type": "object", "properties": {"models": schema["properties"]["models"]}}
    block = {"models": {name: copy.deepcopy(spec)}}  # the schema's defaults go into the copy
    try:
        check_unknown_keys(block, sub)
        validate(block, sub)
    except ConfigError as e:
        raise ConfigError("\n".join(ln.replace("config: ", f"{who}: ", 1) for ln in str(e).splitlines())) from None


def _card_file(source) -> Path | None:
    """The card.json a source names (the file, or a folder holding one), if any."""
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        for f in (p, p / "card.json"):
            if f.is_file() and f.name == "card.json":
                return f
    return None


def build(name: str, spec: dict, workdir) -> ModelCard:
    """The card of model `name` from its config block, built as the workflow's model job builds it
    (weights and card under `workdir`/results/models/<name>/); a card already there is reused (delete
    the folder to rebuild)."""
    card_path = Path(workdir) / paths.CARD.format(model=name)
    if card_path.is_file():
        return ModelCard.read(card_path)
    weights = Path(workdir) / paths.WEIGHTS.format(model=name)
    return build_model(name, spec, str(card_path), str(weights), engine_of)


def load_model(source, name: str | None = None, device: str = "cpu", workdir=".circuitloc") -> Model:
    """A model from a hub id (`"gpt2"`), a local Hugging Face directory, a local .gguf file, a
    model config block (`{"source": "toy", "toy": {...}}`, as under `models:` in a run config), a
    built card (a `ModelCard`, a card.json or a run's results/models/<name>/ folder). `name`: what
    the tables call it (default: the last part of the source). `workdir`: where a built card and
    weights go."""
    if isinstance(source, ModelCard):
        return Model(source, device)
    card_file = _card_file(source)
    if card_file is not None:
        return Model(ModelCard.read(card_file), device)
    spec = spec_of(source)
    if name is None:
        gguf = spec.get("gguf") if isinstance(spec.get("gguf"), dict) else {}
        where = spec.get("hf") if isinstance(spec.get("hf"), str) else gguf.get("path")
        where = where if isinstance(where, str) and where else "model"
        name = Path(str(where).rstrip("/")).name.removesuffix(".gguf")
    if isinstance(source, dict):
        check_block(name, spec)
    return Model(build(name, spec, workdir), device)
