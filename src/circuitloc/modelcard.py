"""A model's card (results/models/<model>/card.json) as one frozen, typed record, read and written
by one pair (`ModelCard.read`, `ModelCard.write`): what every later stage knows about a model
without loading it. On the ground floor (standard library only) because the torch jobs and the
table jobs both read it; circuitloc.models.card builds it.

The file's bytes are what `write` makes of the record: the shared fields, then the fields of the
card's source (`SOURCE_FIELDS`, in that order), then `weights` and `engine`, as indented JSON. A
rebuild with identical weights writes identical bytes (tests/models/test_weights.py), and reading a card
and writing it again gives the same bytes back (tests/unit/test_modelcard.py). A card with a field
missing or one it does not know (written by another version) is refused, naming the file and the
command that rebuilds it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from circuitloc.atomic import read_json, rebuild_hint, write_json
from circuitloc.errors import ArtifactError

# Each source's own fields, in the card's order. A toy copied from a checkpoint also names it.
SOURCE_FIELDS = {"toy": ("checks", "steps", "recipe", "checkpoint"), "gguf": ("gguf", "sha256"),
                 "hf": ("hf", "revision", "revision_requested")}
OPTIONAL = {"checkpoint", "device_map", "max_memory"}  # written only where set
_TYPES = {"int": int, "str": str, "bool": bool}


@dataclass(frozen=True, kw_only=True)
class ModelCard:
    """`attention`: mha or gqa; `d_head`: the head width; `n_params`: counted on the meta device;
    `tokenizer`: its class; `prepend_bos`: whether prompts start with <bos>; `path`: the weights
    directory; `facts_form`: natural or qa; `architecture`: the Hugging Face class; `device_map`: 'auto' where
    accelerate spreads the model over the node's GPUs (within `max_memory`), else absent; `weights`: each
    weights file's size and sha256 (None: not recorded, a card built in memory by a test);
    `engine`: the engine its jobs scan with (scan, bridge or scan-unverified, `engine.select.engine_of`;
    auto: chosen when the job runs). The source's own: a toy's held-out `checks`, training `steps`,
    `recipe` and `checkpoint`; a GGUF's file and `sha256`; a hub model's id (`hf`), the snapshot's
    commit (`revision`) and the revision asked for."""

    name: str
    source: str
    family: str
    attention: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    n_params: int
    dtype: str
    tokenizer: str
    prepend_bos: bool
    path: str
    facts_form: str
    architecture: str
    device_map: str | None = None
    max_memory: dict | None = None
    checks: dict | None = None
    steps: int | None = None
    recipe: dict | None = None
    checkpoint: str | None = None
    gguf: str | None = None
    sha256: str | None = None
    hf: str | None = None
    revision: str | None = None
    revision_requested: str | None = None
    weights: dict | None = None
    engine: str = "auto"

    @staticmethod
    def fields_of(source: str) -> tuple[str, ...]:
        """The fields a card of `source` holds, in the file's order."""
        shared = tuple(f.name for f in dataclasses.fields(ModelCard) if f.name not in _OWN)
        return shared[:-2] + SOURCE_FIELDS[source] + shared[-2:]

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.fields_of(self.source)
                if not (k in OPTIONAL and getattr(self, k) is None)}

    def write(self, path) -> None:
        write_json(self.to_dict(), path)

    @classmethod
    def read(cls, path) -> ModelCard:
        """The card at `path`; one a later or earlier version wrote (a field missing or unknown, a
        field of the wrong type) is an ArtifactError naming the file and how to rebuild it."""
        data = read_json(path)
        if not isinstance(data, dict):
            raise ArtifactError(f"{path}: model card is not a JSON object; {rebuild_hint(path)}")
        return cls.of(data, path)

    @classmethod
    def of(cls, data: dict, path="a model card") -> ModelCard:
        """A card from its JSON fields, checked as `read` checks a file (`path` names it in errors)."""
        if data.get("source") not in SOURCE_FIELDS:
            raise ArtifactError(f"{path}: model card has source {data.get('source')!r} (expected one of "
                                f"{', '.join(SOURCE_FIELDS)}); {rebuild_hint(path)}")
        want = cls.fields_of(data["source"])
        missing = [k for k in want if k not in data and k not in OPTIONAL]
        extra = [k for k in data if k not in want]
        if missing or extra:
            what = "; ".join(s for s in (missing and f"lacks {', '.join(map(repr, missing))}",
                                         extra and f"has unknown {', '.join(map(repr, extra))}") if s)
            raise ArtifactError(f"{path}: model card {what} (written by another version of circuitloc); "
                                f"{rebuild_hint(path)}")
        for f in dataclasses.fields(cls):
            kind = _TYPES.get(str(f.type))
            v = data.get(f.name)
            if kind and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
                raise ArtifactError(f"{path}: model card field {f.name!r} is {v!r}, not {f.type}; {rebuild_hint(path)}")
        return cls(**data)


_OWN = {k for fields in SOURCE_FIELDS.values() for k in fields}
