"""Indirect object identification: 'When Mary and John went to the store, John gave a drink to' -> Mary."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pandas as pd
import torch

from ..errors import DatasetError
from .common import encode, single_token

RESOURCES = Path(__file__).resolve().parents[3] / "resources" / "ioi"


def _lines(path: Path) -> list[str]:
    if not path.exists():
        raise DatasetError(f"IOI resource file not found: {path}")
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def load_resources(root=None) -> dict[str, list[str]]:
    root = Path(root) if root else RESOURCES
    return {k: _lines(root / f"{k}.txt") for k in ("templates", "names", "places", "objects")}


def generate(n: int, seed: int, resources: dict | None = None) -> pd.DataFrame:
    """ABBA and BABA sentences in equal numbers, from the shipped templates."""
    res = resources or load_resources()
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        tpl = rng.choice(res["templates"])
        io, s = rng.sample(res["names"], 2)
        order = "ABBA" if i % 2 == 0 else "BABA"
        first, second = (io, s) if order == "ABBA" else (s, io)
        # The template is written in ABBA order: swap the first two mentions for BABA.
        text = tpl.replace("{IO}", "\0A", 1).replace("{S}", "\0B", 1)
        text = text.replace("\0A", first).replace("\0B", second)
        text = text.replace("{S}", s).replace("{IO}", io)
        text = text.replace("{PLACE}", rng.choice(res["places"])).replace("{OBJECT}", rng.choice(res["objects"]))
        rows.append({"prompt": text, "io": io, "s": s, "order": order, "template": res["templates"].index(tpl)})
    return pd.DataFrame(rows)


def read_fahamu(path) -> pd.DataFrame:
    """fahamu/ioi rows are full sentences ending in the IO name; S is the other repeated name."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"IOI parquet not found: {path} (set tasks.ioi.source.path)")
    df = pd.read_parquet(path)
    if "ioi_sentences" not in df.columns:
        raise DatasetError(f"{path}: expected a column 'ioi_sentences', found {list(df.columns)}")
    rows = []
    for sent in df["ioi_sentences"].astype(str):
        sent = sent.strip().rstrip(".")
        prompt, _, io = sent.rpartition(" ")
        words = re.findall(r"[A-Z][a-z]+", prompt)
        repeated = [w for w in dict.fromkeys(words) if words.count(w) >= 2 and w != io]
        if not prompt or io not in words or len(repeated) != 1:
            continue
        s = repeated[0]
        order = "ABBA" if prompt.index(io) < prompt.index(s) else "BABA"
        rows.append({"prompt": prompt, "io": io, "s": s, "order": order, "template": -1})
    return pd.DataFrame(rows)


def build(raw: pd.DataFrame, tokenizer, prepend_bos: bool, n: int, n_score: int, seed: int):
    """Keep sentences whose IO and S are single tokens for this tokenizer; sample n; mark n_score."""
    counts = {"input": int(len(raw))}
    df = raw.drop_duplicates("prompt").copy()
    counts["dropped_duplicate"] = counts["input"] - len(df)
    df["io_id"] = [single_token(tokenizer, w) for w in df["io"]]
    df["s_id"] = [single_token(tokenizer, w) for w in df["s"]]
    ok = df["io_id"].notna() & df["s_id"].notna()
    counts["dropped_multitoken_name"] = int((~ok).sum())
    df = df[ok]
    if len(df) == 0:
        raise DatasetError("no IOI sentence survives the single-token name filter for this tokenizer")
    df = df.sample(n=min(n, len(df)), random_state=seed).reset_index(drop=True)
    counts["kept"] = int(len(df))
    counts["requested"] = int(n)
    df["io_id"] = df["io_id"].astype("int64")
    df["s_id"] = df["s_id"].astype("int64")
    df["input_ids"] = [encode(tokenizer, p, prepend_bos) for p in df["prompt"]]
    df["score"] = df.index < n_score
    return df, counts


def metric(last_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per-prompt logit difference logit(IO) - logit(S) at the last position."""
    idx = torch.arange(last_logits.shape[0])
    return last_logits[idx, batch["io_id"]] - last_logits[idx, batch["s_id"]]
