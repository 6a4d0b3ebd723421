"""What the facts dataset drops, counted in its filter counts: a prompt and answer repeated under
another name, a prompt longer than the model's context; and its own check that no scoring prompt
is among the held-out rows."""

import polars as pl
import pytest
import torch
from helpers import word_tokenizer

from circuitloc.errors import DatasetError
from circuitloc.tasks import facts

HEADER = "\t".join(facts.COLUMNS)


def _facts_file(tmp_path, rows):
    f = tmp_path / "facts.tsv"
    f.write_text("\n".join([HEADER] + ["\t".join(r) for r in rows]) + "\n")
    return f


def _everything_known(tok):
    """The clean logits of a model that knows every fact (its answer the top token)."""
    def last_logits(rows):
        out = torch.zeros(len(rows), len(tok))
        out[torch.arange(len(rows)), torch.tensor(rows["answer_id"].to_list())] = 1.0
        return out
    return last_logits


def _build(tmp_path, rows, **context):
    tok = word_tokenizer()
    return facts.build_dataset(tok, False, {"top_k": 3, "n_score": 1}, 0,
                               inputs={"facts": _facts_file(tmp_path, rows)}, form="natural",
                               last_logits=_everything_known(tok), **context)


def test_a_prompt_and_answer_repeated_under_a_renamed_relation_is_dropped_and_counted(tmp_path):
    rows = [("d", "Mary", "gave", "book", "Mary gave the", "Mary gave the"),
            ("d", "Mary", "handed", "book", "Mary gave the", "Mary gave the"),  # relation renamed only
            ("d", "John", "went", "store", "John went to the", "John went to the")]
    df, counts = _build(tmp_path, rows)
    assert counts["dropped_duplicate"] == 1 and counts["kept"] == 2
    assert sorted(df["prompt"].to_list()) == ["John went to the", "Mary gave the"]


def test_a_scoring_prompt_among_the_held_out_rows_is_an_error():
    df = pl.DataFrame({"input_ids": [[5, 6], [7, 8], [5, 6]], "answer_id": [9, 9, 9], "score": [True, False, False]},
                      schema={"input_ids": pl.List(pl.Int64), "answer_id": pl.Int64, "score": pl.Boolean})
    with pytest.raises(DatasetError, match=r"^facts.tsv: 1 held-out row\(s\) repeat a scoring fact \(its prompt and "
                                           r"answer, or its subject and answer\)$"):
        facts.check_heldout(df, "facts.tsv")
    facts.check_heldout(df[:2], "facts.tsv")


def test_a_scoring_fact_among_the_held_out_rows_under_other_words_is_an_error():
    """Other tokens, the same subject and answer: the same fact, by meaning."""
    df = pl.DataFrame({"input_ids": [[5, 6], [7, 8], [3, 4]], "answer_id": [9, 9, 9], "score": [True, False, False],
                       "subject": ["Mary", "John", " mary "], "answer": ["book", "book", "Book"]},
                      schema={"input_ids": pl.List(pl.Int64), "answer_id": pl.Int64, "score": pl.Boolean,
                              "subject": pl.String, "answer": pl.String})
    with pytest.raises(DatasetError, match=r"^facts.tsv: 1 held-out row\(s\) repeat a scoring fact"):
        facts.check_heldout(df, "facts.tsv")
    facts.check_heldout(df[:2], "facts.tsv")


def test_a_fact_repeated_under_a_renamed_relation_and_reworded_prompt_is_dropped_and_counted(tmp_path, caplog):
    """Ten facts, each also under another relation name with another wording (other tokens): before,
    deduplication compared tokens only and every scoring fact was among the held-out rows too."""
    subjects = ["Mary", "John", "Tom", "Anna", "Paul", "Kate", "Lisa", "the", "store", "garden"]
    rows = [("d", s, "gave", "book", f"{s} gave the", f"{s} gave the") for s in subjects]
    rows += [("d", s.upper() if i % 2 else s, "handed", "book", f"then {s} went to the", f"then {s} went to the")
             for i, s in enumerate(subjects)]  # renamed relation, reworded prompt; case aside, the same subject
    tok = word_tokenizer()
    with caplog.at_level("INFO", logger="circuitloc"):
        df, counts = facts.build_dataset(tok, False, {"top_k": 3, "n_score": 10}, 0,
                                         inputs={"facts": _facts_file(tmp_path, rows)}, form="natural",
                                         last_logits=_everything_known(tok))
    assert counts["dropped_duplicate"] == 10 and counts["kept"] == 10
    assert sorted(df["relation"].to_list()) == ["gave"] * 10  # each fact's first row kept
    assert "10 repeated fact(s) dropped" in caplog.text
    # a built dataset passes its own held-out check; the same rows with the rewordings put back do not
    reworded = facts.build(facts.load(_facts_file(tmp_path, rows[10:])), tok, False, "natural")[0]
    both = pl.concat([df.filter(pl.col("score")), reworded.with_columns(pl.lit(False).alias("score"))],
                     how="diagonal_relaxed")
    with pytest.raises(DatasetError, match=r": 10 held-out row\(s\) repeat a scoring fact"):
        facts.check_heldout(both, "facts.tsv")


def test_a_prompt_longer_than_the_models_context_is_dropped_and_counted(tmp_path, caplog):
    long = " ".join(["the"] * 12) + " Mary gave the"
    rows = [("d", "Mary", "gave", "book", long, long),
            ("d", "John", "went", "store", "John went to the", "John went to the")]
    with caplog.at_level("WARNING", logger="circuitloc"):
        df, counts = _build(tmp_path, rows, context_len=10)
    assert counts["dropped_over_context"] == 1 and counts["context_positions"] == 10 and counts["kept"] == 1
    assert df["prompt"].to_list() == ["John went to the"]
    assert "longer than the model's context of 10 positions (the longest 15 tokens)" in caplog.text


def test_the_shipped_facts_hold_each_fact_once():
    """So deduplicating by subject and answer drops none of them: the default run's facts sets stand."""
    shipped = facts.load()
    assert len(set(facts.fact_key(shipped))) == len(shipped) == 493
