import re

import pandas as pd
import pytest

from circuitloc.errors import DatasetError
from circuitloc.tasks import facts, induction, ioi
from helpers import word_tokenizer


def test_generator_makes_abba_and_baba_with_io_last():
    df = ioi.generate(40, seed=1)
    assert set(df["order"]) == {"ABBA", "BABA"}
    for _, r in df.iterrows():
        assert r["prompt"].count(r["s"]) == 2 and r["prompt"].count(r["io"]) == 1
        first_io, first_s = r["prompt"].index(r["io"]), r["prompt"].index(r["s"])
        assert (first_io < first_s) == (r["order"] == "ABBA")
    assert ioi.generate(40, seed=1).equals(df)


def test_filter_drops_and_counts_names_that_split():
    tok = word_tokenizer()  # knows Mary, John, Tom, Anna, Paul, Kate, Lisa only
    raw = pd.DataFrame([
        {"prompt": "Then , Mary and John went to the store . John gave a drink to", "io": "Mary", "s": "John",
         "order": "ABBA", "template": 0},
        {"prompt": "Then , Bartholomew and John went to the store . John gave a drink to", "io": "Bartholomew",
         "s": "John", "order": "ABBA", "template": 0},
        {"prompt": "Then , Tom and Zebedee went to the store . Zebedee gave a drink to", "io": "Tom",
         "s": "Zebedee", "order": "ABBA", "template": 0},
    ])
    df, counts = ioi.build(raw, tok, prepend_bos=True, n=10, n_score=1, seed=0)
    assert counts["dropped_multitoken_name"] == 2 and counts["kept"] == 1
    assert list(df["io"]) == ["Mary"]
    assert df["input_ids"].iloc[0][0] == tok.bos_token_id
    with pytest.raises(DatasetError, match="single-token"):
        ioi.build(raw.iloc[1:], tok, True, 10, 1, 0)


def test_fahamu_reader(tmp_path):
    path = tmp_path / "ioi.parquet"
    pd.DataFrame({"ioi_sentences": ["Then, Mary and John went to the store. John gave a drink to Mary",
                                    "When John and Mary went out, John gave a book to Mary."]}).to_parquet(path)
    df = ioi.read_fahamu(path)
    assert list(df["io"]) == ["Mary", "Mary"] and list(df["s"]) == ["John", "John"]
    assert list(df["order"]) == ["ABBA", "BABA"]
    with pytest.raises(DatasetError, match="not found"):
        ioi.read_fahamu(tmp_path / "missing.parquet")


def test_induction_sequences_put_a_and_b_in_place():
    tok = word_tokenizer([f"w{c}{d}" for c in "abcdefghij" for d in "abcdefghijklmnopqrst"])
    cands = induction.candidate_tokens(tok, min_count=20)
    assert set(cands).isdisjoint(tok.all_special_ids)
    df = induction.sequences(cands, 30, (2, 5), (4, 9), seed=3, bos_id=tok.bos_token_id)
    for _, r in df.iterrows():
        seq, nr = r["input_ids"], r["norep_ids"]
        assert seq[0] == tok.bos_token_id
        assert seq[r["b_pos"] - 1] == r["a_id"] == seq[-1] and seq[r["b_pos"]] == r["b_id"]
        assert len(set(seq)) == len(seq) - 1  # only A repeats
        assert r["b_id"] not in nr and nr[-1] == r["a_id"] and len(nr) == len(seq)
        assert 2 <= r["prefix_len"] <= 5 and 4 <= r["suffix_len"] <= 9
    again = induction.sequences(cands, 30, (2, 5), (4, 9), seed=3, bos_id=tok.bos_token_id)
    assert again.equals(df)


def test_facts_file_is_curated():
    df = facts.load()
    assert len(df) == 493
    assert df["domain"].nunique() == 10
    assert not df.duplicated(["subject", "relation"]).any()
    for _, r in df.iterrows():
        assert r["answer"].isalpha()
        assert r["qa"].startswith("Q: ") and r["qa"].endswith("\nA:")
        assert r["answer"].lower() not in r["natural"].lower().split()
        # a prefix that the answer continues: no trailing space or sentence end before it
        assert r["natural"] == r["natural"].rstrip() and not re.search(r"[a-z]{2,}[.?!]$", r["natural"])
    spot = {("France", "capital_of"): "Paris", ("Japan", "capital_of"): "Tokyo",
            ("Japan", "currency_of"): "yen", ("Hg", "element_with_symbol"): "mercury",
            ("solar system", "hottest_planet"): "Venus", ("North Star", "star_name"): "Polaris",
            ("The Great Gatsby", "author_of"): "Fitzgerald", ("Kenya", "currency_of"): "shilling"}
    got = {(r.subject, r.relation): r.answer for r in df.itertuples()}
    for key, answer in spot.items():
        assert got.get(key) == answer, key
    by_domain = df.groupby("domain").size()
    assert (by_domain >= 20).all()
