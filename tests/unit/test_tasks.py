import re

import polars as pl
import pytest
from helpers import FACT_ROWS, word_tokenizer, write_facts

from circuitloc.errors import DatasetError
from circuitloc.tasks import facts, fahamu, induction, ioi, ioi_templates


def test_generator_makes_abba_and_baba_with_io_last():
    df = ioi.generate(40, seed=1)
    assert set(df["order"]) == {"ABBA", "BABA"}
    for r in df.iter_rows(named=True):
        assert r["prompt"].count(r["s"]) == 2 and r["prompt"].count(r["io"]) == 1
        first_io, first_s = r["prompt"].index(r["io"]), r["prompt"].index(r["s"])
        assert (first_io < first_s) == (r["order"] == "ABBA")
    assert ioi.generate(40, seed=1).equals(df)
    # fahamu/ioi's 30 templates: balanced orders, `template` indexes them, and the fahamu reader
    # recovers every generated sentence's template
    templates = ioi_templates.load_templates()
    assert (df["order"] == "ABBA").sum() == 20
    assert [ioi.template_order(templates[k]) for k in df["template"]] == df["order"].to_list()
    rows, counts = fahamu.match_templates([f"{p} {io}" for p, io in zip(df["prompt"], df["io"])], templates)
    assert counts == {"matched_template": 40, "own_template": 0, "dropped_unparsed": 0}
    assert rows["template"].to_list() == df["template"].to_list()


def test_filter_drops_and_counts_names_that_split():
    tok = word_tokenizer(["Then"])  # knows Mary, John, Tom, Anna, Paul, Kate, Lisa only; every word of the prompts
    raw = pl.DataFrame([
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
    assert df["input_ids"][0][0] == tok.bos_token_id
    with pytest.raises(DatasetError, match=r"dropped_multitoken_name filter.*removed all 2"):
        ioi.build(raw[1:], tok, True, 10, 1, 0)


def test_templates_are_the_ioi_papers_30():
    templates = ioi_templates.load_templates()
    assert len(templates) == 30 and len(set(templates)) == 30
    orders = [ioi.template_order(t) for t in templates]
    assert orders == ["ABBA"] * 15 + ["BABA"] * 15
    for a, b in zip(templates[:15], templates[15:]):  # template k + 15: the first two names swapped
        assert b.replace("{S}", "\0", 1).replace("{IO}", "{S}", 1).replace("\0", "{IO}", 1) == a
    assert "Then, {S} and {IO} went to the {PLACE}. {S} gave a {OBJECT} to" in templates


def _fahamu_rows(n, seed, extra=()):
    """fahamu/ioi-style full sentences with their truth: prompt, io, s, order, template."""
    truth = ioi.synthetic_fahamu(n, seed)
    return pl.DataFrame({"ioi_sentences": list(truth["sentence"]) + list(extra)}), truth.drop("sentence")


# not of fahamu's form: dropped (dropped_unparsed)
UNMATCHED = ["Then, Mary and John went to the store. John gave a drink to John",  # IO = S
             "Then, Mary and John went to the store. Mary gave a drink to Mary",  # the IO repeated, S never
             "Then, Mary and John and Anna went to the store. Anna and John gave a drink to Mary",  # two S
             ""]
# of fahamu's form but from no template of the 30: kept, with ids of their own skeletons
OWN = ["When John and Mary went out, John gave a book to Mary.",
       "Afterwards, Anna and Tom had a lovely time. Tom gave a cake to Anna"]


@pytest.fixture(scope="module")
def fahamu_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fahamu") / "mecha_ioi_200k.parquet"
    raw, truth = _fahamu_rows(3000, seed=5, extra=UNMATCHED + OWN)
    raw.write_parquet(path, row_group_size=500)
    return path, truth


def test_fahamu_reader_recovers_templates_names_and_order(fahamu_file):
    path, truth = fahamu_file
    rows, counts = fahamu.read_fahamu(path, pool=None, seed=0)
    n = 3000 + len(UNMATCHED) + len(OWN)
    assert counts == {"source_rows": n, "sampled": n, "matched_template": 3000, "own_template": len(OWN),
                      "dropped_unparsed": len(UNMATCHED)}
    assert list(rows.columns) == ["prompt", "io", "s", "order", "template"]
    for col in ("prompt", "io", "s", "order", "template"):  # row order is file order
        assert rows[col].to_list()[:3000] == truth[col].to_list(), col
    assert rows[3000:].select("io", "s", "order").rows() == [("Mary", "John", "BABA"), ("Anna", "Tom", "ABBA")]
    assert rows["prompt"][3000] == "When John and Mary went out, John gave a book to"
    assert min(rows["template"][3000:]) >= 2**32 and rows["template"][3000] != rows["template"][3001]
    assert set(rows["template"][:3000]) == set(range(30)) and set(rows["order"]) == {"ABBA", "BABA"}
    # nouns the shipped lists lack (fahamu's may differ) still match: only the template's words are fixed
    odd, _ = fahamu.match_templates(["The old train station Mary and John went to had a box of chocolates. "
                                  "John gave it to Mary"], ioi_templates.load_templates())
    assert odd.select("io", "s", "order", "template").rows() == [("Mary", "John", "ABBA", 13)]


def test_fahamu_sample_is_seeded_bounded_and_lazy(fahamu_file, monkeypatch):
    import pyarrow.parquet as pq

    path, truth = fahamu_file

    def full_read(*a, **k):
        raise AssertionError("the fahamu reader must scan lazily, never load the whole file")

    for mod, name in ((pl, "read_parquet"), (pq, "read_table")):
        monkeypatch.setattr(mod, name, full_read)
    scans = []
    real_scan = pl.scan_parquet
    monkeypatch.setattr(pl, "scan_parquet", lambda *a, **k: scans.append(a) or real_scan(*a, **k))
    a, ca = fahamu.read_fahamu(path, pool=400, seed=1)
    b, _ = fahamu.read_fahamu(path, pool=400, seed=1)
    c, _ = fahamu.read_fahamu(path, pool=400, seed=2)
    assert scans and ca["sampled"] == 400 and len(a) == 400 - ca["dropped_unparsed"]
    assert a.equals(b) and not a.equals(c)
    assert fahamu.read_fahamu(path, pool=400, seed=1, window=700)[0].equals(a)  # many windows, same sample
    assert set(a["prompt"]) <= set(truth["prompt"]) | {s.rsplit(" ", 1)[0] for s in OWN}
    big, _ = fahamu.read_fahamu(path, pool=10**6, seed=1)  # a pool larger than the file: every row
    assert len(big) == 3000 + len(OWN)


def test_fahamu_errors_name_the_file_column_and_cache(tmp_path, fahamu_file):
    path, _ = fahamu_file
    with pytest.raises(DatasetError, match="not found"):
        fahamu.read_fahamu(tmp_path / "missing.parquet", 10, 0)
    with pytest.raises(DatasetError, match="not found"):
        fahamu.fahamu_source({"kind": "fahamu", "path": str(tmp_path / "missing.parquet")})
    assert fahamu.fahamu_source({"kind": "fahamu", "path": str(path.parent)})[0] == path  # a directory: its file
    bad = tmp_path / "bad.parquet"
    pl.DataFrame({"text": ["x"]}).write_parquet(bad)
    with pytest.raises(DatasetError, match="ioi_sentences"):
        fahamu.read_fahamu(bad, 10, 0)


FAHAMU_FILES = {None: "mecha_ioi_200k.parquet", "26m": "mecha_ioi_26m.parquet"}


@pytest.fixture(scope="module")
def offline_fahamu_errors(tmp_path_factory):
    """{file: what fahamu_source says} for each file of FAHAMU_FILES, offline with an empty hub cache:
    one fresh interpreter for all (the hub client reads HF_HUB_OFFLINE and the cache when imported)."""
    import os
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("fahamu")
    cache = home / "hf" / "hub"
    sources = [{"kind": "fahamu", **({"file": f} if f else {})} for f in FAHAMU_FILES]
    code = ("from circuitloc.tasks import fahamu\nfrom circuitloc.errors import DatasetError\n"
            f"for src in {sources!r}:\n"
            "    try:\n        fahamu.fahamu_source(src)\n    except DatasetError as e:\n        print(e)\n"
            "    else:\n        print('no error')\n"
            "    print('-- next --')")
    env = {**os.environ, "HF_HOME": str(home / "hf"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    said = out.stdout.split("-- next --\n")
    assert len(said) == len(FAHAMU_FILES) + 1, out.stdout + out.stderr
    return cache, dict(zip(FAHAMU_FILES, said))


@pytest.mark.parametrize("file,name", FAHAMU_FILES.items())
def test_fahamu_offline_empty_cache_names_cache_and_fetch_command(offline_fahamu_errors, file, name):
    cache, said = offline_fahamu_errors
    msg = said[file]
    assert str(cache) in msg, msg
    assert f"hf download fahamu/ioi {name} --repo-type dataset" in msg, msg


# Ten templates of a user's own, in five ABBA/BABA pairs; two begin with a name.
OWN_TEMPLATES = [
    "{IO} and {S} were sitting in the {PLACE} when {S} handed a {OBJECT} to",
    "{S} and {IO} were sitting in the {PLACE} when {S} handed a {OBJECT} to",
    "Yesterday {IO} met {S} near the {PLACE}, and {S} lent a {OBJECT} to",
    "Yesterday {S} met {IO} near the {PLACE}, and {S} lent a {OBJECT} to",
    "At the {PLACE}, {IO} and {S} argued; later {S} wrote a letter to",
    "At the {PLACE}, {S} and {IO} argued; later {S} wrote a letter to",
    "Because {IO} and {S} were late, {S} sent a {OBJECT} to",
    "Because {S} and {IO} were late, {S} sent a {OBJECT} to",
    "Once {IO} and {S} had cleaned the {PLACE}, {S} threw the {OBJECT} to",
    "Once {S} and {IO} had cleaned the {PLACE}, {S} threw the {OBJECT} to",
]


def test_fahamu_file_from_other_templates_keeps_every_sentence(tmp_path):
    """A file in fahamu's format whose sentences come from templates outside the 30: every sentence is
    kept with its IO, S and order, and one template id per template (so ABBA and BABA forms of one
    template are two groups, as the 30's are), the same in every read."""
    import random

    res = ioi.load_resources()
    rng = random.Random(7)
    truth, sentences = [], []
    for i in range(200):
        k = i % len(OWN_TEMPLATES)
        io, s = rng.sample(res["names"], 2)
        prompt = ioi.fill(OWN_TEMPLATES[k], io, s, rng.choice(res["places"]), rng.choice(res["objects"]))
        truth.append((prompt, io, s, "ABBA" if k % 2 == 0 else "BABA", k))
        sentences.append(f"{prompt} {io}" + ("." if i % 4 == 0 else ""))
    path = tmp_path / "own.parquet"
    pl.DataFrame({"ioi_sentences": sentences}).write_parquet(path)
    rows, counts = fahamu.read_fahamu(path, pool=None, seed=0)
    assert counts == {"source_rows": 200, "sampled": 200, "matched_template": 0, "own_template": 200,
                      "dropped_unparsed": 0}
    assert rows.select("prompt", "io", "s", "order").rows() == [t[:4] for t in truth]
    ids = rows["template"].to_list()
    by_template = {}
    for (*_, k), tid in zip(truth, ids):
        by_template.setdefault(k, set()).add(tid)
    assert all(len(v) == 1 for v in by_template.values()), by_template  # one id per template
    assert len({next(iter(v)) for v in by_template.values()}) == len(OWN_TEMPLATES)  # distinct ids
    assert min(ids) >= 2**32  # never one of the 30's line numbers
    assert fahamu.read_fahamu(path, pool=None, seed=3)[0]["template"].to_list() == ids  # stable
    # the same sentences with another template list: the same ids (they come from the skeleton)
    assert fahamu.match_templates(sentences, ioi_templates.load_templates()[:5])[0]["template"].to_list() == ids


def test_templates_beginning_with_a_slot_match():
    templates = OWN_TEMPLATES[:2] + ioi_templates.load_templates()
    rows, counts = fahamu.match_templates(
        ["Mary and John were sitting in the office when John handed a key to Mary",
         "John and Mary were sitting in the office when John handed a key to Mary.",
         "Then, Mary and John went to the store. John gave a drink to Mary"], templates)
    assert counts == {"matched_template": 3, "own_template": 0, "dropped_unparsed": 0}
    assert rows.select("io", "s", "order", "template").rows() == [
        ("Mary", "John", "ABBA", 0), ("Mary", "John", "BABA", 1), ("Mary", "John", "ABBA", 2)]


def test_an_all_dropped_fahamu_file_names_its_filter(tmp_path):
    path = tmp_path / "bad.parquet"
    pl.DataFrame({"ioi_sentences": UNMATCHED}).write_parquet(path)
    with pytest.raises(DatasetError, match=r"dropped_unparsed filter removed them all.*'dropped_unparsed': 4"):
        fahamu.read_fahamu(path, pool=None, seed=0)


def test_induction_sequences_put_a_and_b_in_place():
    tok = word_tokenizer([f"w{c}{d}" for c in "abcdefghij" for d in "abcdefghijklmnopqrst"])
    cands = induction.candidate_tokens(tok, min_count=20)
    assert set(cands).isdisjoint(tok.all_special_ids)
    df = induction.sequences(cands, 30, (2, 5), (4, 9), seed=3, bos_id=tok.bos_token_id)
    for r in df.iter_rows(named=True):
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
    assert df["domain"].n_unique() == 10
    assert not df.select("subject", "relation").is_duplicated().any()
    for r in df.iter_rows(named=True):
        assert r["answer"].isalpha()
        assert r["qa"].startswith("Q: ") and r["qa"].endswith("\nA:")
        assert r["answer"].lower() not in r["natural"].lower().split()
        # a prefix that the answer continues: no trailing space or sentence end before it
        assert r["natural"] == r["natural"].rstrip() and not re.search(r"[a-z]{2,}[.?!]$", r["natural"])
    spot = {("France", "capital_of"): "Paris", ("Japan", "capital_of"): "Tokyo",
            ("Japan", "currency_of"): "yen", ("Hg", "element_with_symbol"): "mercury",
            ("solar system", "hottest_planet"): "Venus", ("North Star", "star_name"): "Polaris",
            ("The Great Gatsby", "author_of"): "Fitzgerald", ("Kenya", "currency_of"): "shilling"}
    got = {(r["subject"], r["relation"]): r["answer"] for r in df.iter_rows(named=True)}
    for key, answer in spot.items():
        assert got.get(key) == answer, key
    by_domain = df.group_by("domain").len()["len"]
    assert (by_domain >= 20).all()


def test_duplicate_facts_are_dropped_and_counted_in_filter_json(tmp_path, tiny_dirs):
    """A fact repeated in the file (the same subject, relation and answer, whatever the prompt's
    wording) is one fact: never both a scoring and a held-out row, the repeats counted."""
    import json

    from helpers import card_for

    from circuitloc.engine import datasets
    from circuitloc.engine.settings import JobSettings

    repeats = [FACT_ROWS[0], FACT_ROWS[3][:4] + ("the drink is sold at the",), FACT_ROWS[5]]
    path = write_facts(tmp_path / "facts.tsv", FACT_ROWS + repeats)
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    cfg = {"top_k": len(word_tokenizer()), "n_score": 3}  # every fact "known": only the duplicates go
    out, filt = tmp_path / "facts.parquet", tmp_path / "facts.filter.json"
    datasets.build_dataset(JobSettings(card=card, batch_tokens=4096, task="facts"), cfg, {"facts": str(path)}, out, filt)
    df, counts = pl.read_parquet(out), json.loads(filt.read_text())
    key = ["subject", "relation", "answer"]
    assert not df.select(key).is_duplicated().any()
    scoring, heldout = (set(df.filter(pl.col("score") == s).select(key).iter_rows()) for s in (True, False))
    assert scoring and heldout and not scoring & heldout
    assert counts["dropped_duplicate"] == len(repeats)
    assert counts["input"] == len(FACT_ROWS) + len(repeats) and counts["kept"] == len(df) == len(FACT_ROWS)


def test_a_repeated_capitalised_word_is_not_taken_for_the_subject():
    """S is the name said twice: a sentence-initial "Then" said twice (or "After") fills no name slot,
    so the sentence is kept, with its IO, S and order."""
    kept = ["Then, Mary and John went to the park. Then John gave a ball to Mary",
            "After lunch, Anna and Tom went out. After that, Anna gave a cake to Tom."]
    rows, counts = fahamu.match_templates(kept, ioi_templates.load_templates())
    assert counts == {"matched_template": 0, "own_template": 2, "dropped_unparsed": 0}
    assert rows.select("prompt", "io", "s", "order").rows() == [
        ("Then, Mary and John went to the park. Then John gave a ball to", "Mary", "John", "ABBA"),
        ("After lunch, Anna and Tom went out. After that, Anna gave a cake to", "Tom", "Anna", "BABA")]
    # names the list lacks: a word that fills the IO slot of another sentence of the file is a name
    odd = ["Then, Zara and Quill went to the park. Then Quill gave a ball to Zara",
           "Then, Quill and Zara went to the park. Zara gave a ball to Quill"]
    none = {"places": [], "objects": [], "names": []}
    rows, counts = fahamu.match_templates(odd, ioi_templates.load_templates(), none)
    assert counts["dropped_unparsed"] == 0 and rows.select("io", "s").rows() == [("Zara", "Quill"), ("Quill", "Zara")]
    # a word that is neither on the list nor ever in the IO slot: no name to tell S by, dropped
    rows, counts = fahamu.match_templates(odd[:1], ioi_templates.load_templates(), none)
    assert counts["dropped_unparsed"] == 1


UNK_SENTENCES = [  # the test tokenizer knows every word of the first four; "handed" and "lent" it does not
    "then, Mary and John went to the store. John gave a drink to Mary",
    "then, Tom and Anna went to the garden. Anna gave a book to Tom.",
    "then, Kate and Paul went to the store. Kate gave a drink to Paul",
    "then, Lisa and Mary went to the garden. Mary gave a book to Lisa",
    "then, Paul and Lisa went to the garden. Lisa handed a book to Paul",
    "then, John and Kate went to the store. John lent a drink to Kate",
]


@pytest.mark.parametrize("choice", ["drop", "keep"])
def test_prompts_with_unknown_tokens_are_counted_and_dropped_or_kept(tmp_path, tiny_dirs, choice):
    import json

    from helpers import card_for

    from circuitloc.engine import datasets
    from circuitloc.engine.settings import JobSettings

    src = tmp_path / "fahamu.parquet"
    pl.DataFrame({"ioi_sentences": UNK_SENTENCES}).write_parquet(src)
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    cfg = {"source": {"kind": "fahamu", "path": str(src)}, "n": 20, "n_score": 2, "unknown_tokens": choice}
    out, filt = tmp_path / "ioi.parquet", tmp_path / "ioi.filter.json"
    datasets.build_dataset(JobSettings(card=card, batch_tokens=4096, task="ioi"), cfg, {"fahamu": str(src)}, out, filt)
    df, counts = pl.read_parquet(out), json.loads(filt.read_text())
    tok = word_tokenizer()
    unknown = [s for s in UNK_SENTENCES if tok.unk_token_id in tok(s, add_special_tokens=False)["input_ids"]]
    assert len(unknown) == 2 and counts["dropped_unparsed"] == 0  # the test's premise
    has_unk = [tok.unk_token_id in ids for ids in df["input_ids"]]
    if choice == "drop":
        assert counts["dropped_unknown_token"] == len(unknown) and counts["kept_unknown_token"] == 0
        assert not any(has_unk) and len(df) == len(UNK_SENTENCES) - len(unknown)
    else:
        assert counts["kept_unknown_token"] == len(unknown) and counts["dropped_unknown_token"] == 0
        assert sum(has_unk) == len(unknown) and len(df) == len(UNK_SENTENCES)
    assert counts["kept"] == len(df)


def test_unknown_tokens_default_is_drop_run_wide_only():
    """The schema fills tasks.ioi.unknown_tokens (drop), never a model's own ioi block (where a
    default would override the run-wide choice)."""
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / ".test" / "config.yaml").read_text())
    model = next(iter(cfg["models"]))
    cfg["models"][model]["tasks"] = {"ioi": {"n_curve": 5}}
    validate(cfg, str(root / "config" / "schema.yaml"))
    assert cfg["tasks"]["ioi"]["unknown_tokens"] == "drop"
    assert cfg["models"][model]["tasks"]["ioi"] == {"n_curve": 5}
    with pytest.raises(DatasetError, match="unknown_tokens must be one of drop, keep"):
        ioi.candidates(ioi.generate(4, 0), word_tokenizer(), True, "skip")


def test_no_name_of_one_token_names_the_names_file_and_the_model(tmp_path):
    """Every name splits in this tokenizer: the error says which file's names, for which model."""
    import shutil

    from circuitloc.tasks.ioi_templates import RESOURCES

    res = tmp_path / "ioi"
    shutil.copytree(RESOURCES, res)
    (res / "names.txt").write_text("Bartholomew\nZebedee\nMelchizedek\n")
    inputs = {f"ioi_{k}": str(res / f"{k}.txt") for k in ("templates", "names", "places", "objects")}
    cfg = {"source": {"kind": "generate"}, "n": 10, "n_score": 2, "unknown_tokens": "keep"}
    with pytest.raises(DatasetError, match=rf"^{res / 'names.txt'}, model tinyq: no IOI sentence survives the "
                                           r"dropped_multitoken_name filter"):
        ioi.build_dataset(word_tokenizer(), True, cfg, 0, inputs=inputs, model="tinyq")
