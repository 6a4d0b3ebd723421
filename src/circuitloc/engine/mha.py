"""Under multi-head attention (one key/value head per query head: the card's n_kv_heads equals
n_heads) a kv group is one query head: `ablation.units` gives kv group g of layer l exactly query
head l.g's heads, so every number of a kv ablation is its query ablation's. A job that runs both
(engine.pipeline: a model's ablations in one job) computes the query ablation and writes the kv
one's files from it, its unit labels written as kv groups (L3H1 -> L3G1) and its ablation name as
kv: the same files a kv run writes (tests/unit/test_mha_kv.py), without its forward passes."""

from __future__ import annotations

import polars as pl

from circuitloc import io
from circuitloc.modelcard import ModelCard
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary.labels import KV, LABEL_FORMAT, QUERY, UNIT_LABEL

_HEAD = UNIT_LABEL[QUERY].pattern.strip("^$").replace(r"\d+", r"(\d+)")
_AS_GROUP = LABEL_FORMAT[KV].format(layer="${1}", index="${2}")


def query_twin(card: ModelCard, ablation_name: str) -> str | None:
    """The query ablation whose files are `ablation_name`'s when the model is MHA and the ablation
    is a kv one (zero-kv -> zero-query), else None."""
    kind, unit = registry.parse_ablation(ablation_name)
    if unit != KV or card.n_kv_heads != card.n_heads:
        return None
    return registry.ablation_name(kind, QUERY)


def query_first(card: ModelCard, files: dict) -> dict:
    """`files` ({ablation: files}) in their order, except that an MHA model's kv ablation listed
    before its query twin runs right after the twin, so that it can reuse the twin's files (each
    ablation starts from the same torch seed, so the order changes no number)."""
    later: dict = {}
    for a in files:
        twin = query_twin(card, a) if is_kv(a) else None
        if twin in files and list(files).index(twin) > list(files).index(a):
            later.setdefault(twin, []).append(a)
    order = []
    for a in files:
        if not any(a in v for v in later.values()):
            order += [a, *later.get(a, [])]
    return {a: files[a] for a in order}


def is_kv(ablation_name: str) -> bool:
    """Whether the ablation is a kv one, read from its name alone (an unknown kind fails later, in
    its own turn, as it would without this module)."""
    return str(ablation_name).partition("-")[2] == KV


def _relabel_text(col: pl.Expr) -> pl.Expr:
    return col.str.replace_all(rf"\b{_HEAD}\b", _AS_GROUP)


def as_kv(df: pl.DataFrame, query: str, kv: str) -> pl.DataFrame:
    """A query ablation's table as its kv twin writes it: every query-head label (in a column name,
    a text cell or a list of text) as the kv group of the same layer and index, the ablation's name
    (`query`) as `kv`."""
    swap = pl.DataFrame({"n": df.columns}).select(_relabel_text(pl.col("n")))["n"].to_list()
    exprs = []
    for name, dtype in df.schema.items():
        col = pl.col(name)
        if dtype == pl.String:
            col = pl.when(col == query).then(pl.lit(kv)).otherwise(_relabel_text(col))
        elif dtype == pl.List(pl.String):
            col = col.list.eval(_relabel_text(pl.element()))
        exprs.append(col.alias(name))
    return df.select(exprs).rename(dict(zip(df.columns, swap, strict=True)))


def write_as_kv(query_out, kv_out, query: str, kv: str) -> None:
    """Write the kv ablation's output files (`kv_out.outputs()`) from its query twin's, in order."""
    for src, dst in zip(query_out.outputs(), kv_out.outputs(), strict=True):
        io.write_parquet(as_kv(io.read_parquet(src), query, kv), dst)
