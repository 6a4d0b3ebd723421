"""What the claims read (the run's tables and cards), which MHA and GQA models they compare, and
the record of one checked claim (`Claim`: its row of the claims table).

The paper compares Pythia (MHA) with Qwen2.5 (GQA): two families, so an MHA-versus-GQA claim pairs
pretrained models across families by scale. Each MHA model takes the GQA model nearest to it in
parameter count (the card's n_params, Table 1's params), one to one, the closest pairs first, and
only within MATCH_FACTOR: a 3x gap is not "matched scale". Toy models pair only inside their own
family (one recipe, data and seed; only the number of key/value heads differs), never with a
pretrained model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from circuitloc.modelcard import ModelCard

MATCH_FACTOR = 2.0  # the larger of a pair at most twice the smaller's parameter count
PAIR_RULE = (f"pairs: each pretrained MHA model with the pretrained GQA model nearest in parameter count, "
             f"one to one, within {MATCH_FACTOR:g}x; toys only within their own family")


@dataclass(frozen=True)
class Pair:
    """An MHA model and the GQA model it is compared with, and how the pair is named in a row."""
    mha: str
    gqa: str
    label: str


def _params(card: ModelCard) -> float:
    return float(card.n_params)


def _toy(card: ModelCard) -> bool:
    return card.source == "toy"


def toy_pairs(cards: dict) -> list[Pair]:
    """family -> (first MHA, first GQA) over the toy families that hold both attention types."""
    out = []
    toys = {m: c for m, c in cards.items() if _toy(c)}
    for fam in dict.fromkeys(c.family for m, c in toys.items()):
        members = [m for m, c in toys.items() if c.family == fam]
        mha = [m for m in members if toys[m].attention == "mha"]
        gqa = [m for m in members if toys[m].attention == "gqa"]
        if mha and gqa:
            out.append(Pair(mha[0], gqa[0], str(fam)))
    return out


def scale_pairs(cards: dict) -> tuple[list[Pair], list[str]]:
    """(pairs, notes): pretrained MHA and GQA models matched by parameter count (module docstring),
    and a note for each MHA model left without a match (its nearest GQA model and the gap)."""
    def sized(attention):
        return {m: p for m, c in cards.items() if not _toy(c) and c.attention == attention
                and (p := _params(c)) > 0}

    mha, gqa = sized("mha"), sized("gqa")
    gap = {(a, b): max(mha[a], gqa[b]) / min(mha[a], gqa[b]) for a in mha for b in gqa}
    pairs, used = [], set()
    for (a, b), g in sorted(gap.items(), key=lambda kv: (kv[1], kv[0])):
        if g <= MATCH_FACTOR and a not in used and b not in used:
            used |= {a, b}
            pairs.append(Pair(a, b, f"{a} ~ {b} ({g:.2f}x params)"))
    notes = []
    for a in mha:
        if a not in used and gqa:
            b = min(gqa, key=lambda b: (gap[(a, b)], b))
            notes.append(f"{a} unmatched (nearest GQA {b} is {gap[(a, b)]:.2f}x its size"
                         + (", taken" if b in used else "") + ")")
    pairs.sort(key=lambda p: mha[p.mha])
    return pairs, notes


@dataclass(frozen=True)
class Run:
    """What the claims read: tables by name (polars frames; a missing one is None), the cards, and the
    run's curve threshold (config curves.threshold: which heads-to columns the claims read)."""
    tables: dict
    cards: dict
    threshold: float

    def table(self, name: str) -> pl.DataFrame | None:
        return self.tables.get(name)

    def pretrained(self, attention: str) -> list[str]:
        return [m for m, c in self.cards.items() if not _toy(c) and c.attention == attention]

    def matched_pairs(self) -> tuple[list[Pair], str]:
        """(pairs, the rule and its unmatched models, for a claim's reason column)."""
        pairs, notes = scale_pairs(self.cards)
        return toy_pairs(self.cards) + pairs, "; ".join([PAIR_RULE, *notes])


HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable in this run"
ONE_SEED = "not testable (one seed)"  # a toy pair is one training seed: no answer about MHA and GQA
INCONCLUSIVE = "inconclusive"  # measured, but the intervals reach across the claim's cut


@dataclass(frozen=True)
class Claim:
    """One claim checked on the run (a record: a row of the claims table has eight fields);
    `testable`: what a run needs for the claim to be decided (or decided more firmly)."""

    cid: str
    text: str
    models: tuple = ()
    measured: str = ""
    interval: str = ""
    verdict: str = UNTESTABLE
    reason: str = ""
    testable: str = ""

    def row(self) -> dict:
        return {"claim_id": self.cid, "claim": self.text, "models": ", ".join(self.models),
                "measured": self.measured, "interval": self.interval, "verdict": self.verdict, "reason": self.reason,
                "testable_when": self.testable}


def row_of(df: pl.DataFrame | None, model: str) -> dict | None:
    """A table's row of `model` as a dict, or None."""
    if df is None or "model" not in df.columns:
        return None
    hit = df.filter(pl.col("model") == model)
    return hit.row(0, named=True) if hit.height else None


def missing(run: Run, *names) -> str | None:
    """Why a claim cannot be read: the tables of `names` the run does not make, or None."""
    gone = [n for n in names if run.table(n) is None]
    return f"the run has no {' or '.join(gone)} (its config leaves that task or ablation out)" if gone else None


def real(v) -> float:
    """A table cell as a float (empty: NaN)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def split_pairs(run: Run) -> tuple[list[Pair], list[Pair], str]:
    """(pretrained pairs, toy pairs, the pairing rule): a toy pair is one seed of one recipe, so a
    claim about MHA against GQA is judged on pretrained pairs only; toy pairs are named, not judged."""
    pairs, rule = run.matched_pairs()
    toys = toy_pairs(run.cards)
    return [p for p in pairs if p not in toys], toys, rule


def one_seed(claim: Claim, toys: list[Pair]) -> dict:
    """The row of a claim that only toy pairs could test: not testable, one seed."""
    names = ", ".join(f"{p.mha}/{p.gqa}" for p in toys)
    return Claim(claim.cid, claim.text, verdict=ONE_SEED, testable=claim.testable,
                 reason=f"only toy pairs ({names}): one training seed of one recipe says how two models differ, "
                        "not MHA and GQA; the sweep's seeds (docs/sweep.md) compare them across seeds").row()
