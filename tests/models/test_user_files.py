"""Every reader of a file a user supplies (the facts TSV, a fahamu/ioi parquet, model weights) and
every writer of an artifact fails with one line that names the file and the problem."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import FACT_ROWS, write_facts

from circuitloc.errors import DatasetError, ModelSourceError
from circuitloc.tasks import facts, fahamu, ioi, ioi_templates


def _one_line(excinfo, path) -> str:
    msg = str(excinfo.value)
    assert str(path) in msg and "\n" not in msg, msg
    return msg


def _tsv(tmp_path, text: str):
    path = tmp_path / "facts.tsv"
    path.write_text(text)
    return path


HEADER = "\t".join(facts.COLUMNS) + "\n"
GOOD = "people\tMary\tfriend_of\tJohn\tMary went to the store with\tQ: Who?\\nA:\n"


@pytest.mark.parametrize("bad, line", [
    ("people\tTom\tfriend_of\tAnna\tTom gave a book to\tQ: Who?\\nA:\textra\n", 3),  # a field too many
    ("people\tTom\tfriend_of\tAnna\n", 3),  # fields missing: polars would fill them with empty strings
], ids=["too-many", "too-few"])
def test_facts_row_with_a_wrong_field_count_names_file_and_line(tmp_path, bad, line):
    path = _tsv(tmp_path, HEADER + GOOD + bad + GOOD)
    with pytest.raises(DatasetError) as e:
        facts.load(path)
    msg = _one_line(e, path)
    assert f"line {line} has {bad.count(chr(9)) + 1} tab-separated fields, the header has 6" in msg


def test_facts_quote_is_text_not_a_quote_char(tmp_path):
    """A `"` opening or inside a field is part of the prompt (polars' default quote char would
    swallow tabs and lines up to the next one, or fail)."""
    rows = [("books", "Hamlet", "author_of", "Shakespeare", '"Hamlet" was written by'),
            ("books", "Emma", "author_of", "Austen", 'The novel "Emma was written by')]
    path = write_facts(tmp_path / "facts.tsv", FACT_ROWS[:2] + rows + FACT_ROWS[2:])
    df = facts.load(path)
    assert df.select("domain", "subject", "relation", "answer", "natural").rows() == [r for r in FACT_ROWS[:2] + rows
                                                                            + FACT_ROWS[2:]]


@pytest.mark.parametrize("text, what", [(HEADER, "no facts (a header and no rows)"), ("", "empty file"),
                                        (b"\xff\xfe" + HEADER.encode(), "not UTF-8 text")],
                         ids=["header-only", "empty", "not-utf8"])
def test_facts_file_without_facts_or_not_text_is_named(tmp_path, text, what):
    path = tmp_path / "facts.tsv"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    with pytest.raises(DatasetError) as e:
        facts.load(path)
    assert what in _one_line(e, path)


def _invalid_utf8_parquet(path):
    """A string column holding bytes that are not UTF-8 (pyarrow writes it unchecked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = b"Then, Mary and John went to the store. John gave a drink to Mary"
    data = good + b"Then, \xff\xfe and John went"
    offsets = np.array([0, len(good), len(data)], dtype=np.int32)
    arr = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
    pq.write_table(pa.table({"ioi_sentences": arr}), path)


def _binary_column_parquet(path):
    pl.DataFrame({"ioi_sentences": [b"Then, Mary and John went", b"\xff\xfe\x00"]}).write_parquet(path)


def _fahamu_bytes(n=2000):
    sentences = ioi.synthetic_fahamu(n, 0)["sentence"]
    import io as stdio

    buf = stdio.BytesIO()
    pl.DataFrame({"ioi_sentences": sentences}).write_parquet(buf, row_group_size=200)
    return buf.getvalue()


@pytest.mark.parametrize("make, what", [
    (_invalid_utf8_parquet, "'ioi_sentences' is not valid UTF-8 text"),
    (_binary_column_parquet, "'ioi_sentences' is not valid UTF-8 text"),
    (lambda p: p.write_bytes(_fahamu_bytes()[:-200]), "not a readable parquet file, truncated"),
    (lambda p: p.write_bytes(b"\x00\x01 not parquet at all " * 50), "not a readable parquet file"),
    (lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
    (lambda p: pl.DataFrame({"ioi_sentences": []}, schema={"ioi_sentences": pl.String}).write_parquet(p),
     "empty: the parquet file has no rows"),
    (lambda p: pl.DataFrame({"ioi_sentences": ["", None, "  "]}).write_parquet(p), "blank or null"),
], ids=["invalid-utf8", "binary-column", "truncated", "not-parquet", "zero-bytes", "no-rows", "blank"])
def test_unreadable_or_empty_fahamu_file_is_named_not_blamed_on_a_filter(tmp_path, make, what):
    path = tmp_path / "mecha_ioi_200k.parquet"
    make(path)
    with pytest.raises(DatasetError) as e:
        fahamu.read_fahamu(path, pool=None, seed=0)
    msg = _one_line(e, path)
    assert what in msg and "dropped_unparsed" not in msg, msg


def test_binary_column_of_utf8_sentences_is_read_as_text(tmp_path):
    truth = ioi.synthetic_fahamu(50, 3)
    path = tmp_path / "bin.parquet"
    pl.DataFrame({"ioi_sentences": [s.encode() for s in truth["sentence"]]}).write_parquet(path)
    rows, counts = fahamu.read_fahamu(path, pool=None, seed=0)
    assert counts["matched_template"] == 50 and rows["prompt"].to_list() == truth["prompt"].to_list()


def test_truncated_safetensors_is_named(tmp_path):
    from helpers import tiny_model, word_tokenizer

    from circuitloc.models.load import load_hf

    tok = word_tokenizer()
    tiny_model("qwen_gqa", len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelSourceError) as e:
        load_hf(str(tmp_path))
    assert "truncated" in _one_line(e, weights)


# A process whose files may not grow past 64 KiB (RLIMIT_FSIZE, SIGXFSZ ignored): each write then
# fails with EFBIG exactly as a full disk fails with ENOSPC, through the writer's real code path.
FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np, polars as pl
    from circuitloc import io
    from circuitloc.errors import ArtifactError
    kind, target = sys.argv[1], sys.argv[2]
    df = pl.DataFrame({"x": np.random.default_rng(0).random(200_000)})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    write = {"parquet": lambda: io.write_parquet(df, target), "csv": lambda: io.write_csv(df, target),
             "json": lambda: io.write_json({"x": df["x"].to_list()}, target),
             "text": lambda: io.write_text("x" * 200_000, target)}[kind]
    try:
        write()
    except ArtifactError as e:
        print("ArtifactError:", e)
    else:
        print("no error")
""")


@pytest.mark.parametrize("kind", ["parquet", "csv", "json", "text"])
def test_a_write_that_runs_out_of_disk_is_one_line_and_leaves_nothing(tmp_path, kind):
    target = tmp_path / f"table.{kind}"
    target.write_text("the previous version\n")  # an earlier result: kept whole, never half-replaced
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # this checkout's circuitloc
    out = subprocess.run([sys.executable, "-c", FULL_DISK, kind, str(target)], capture_output=True, text=True, check=False,
                         env=env, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert lines and lines[-1].startswith(f"ArtifactError: {target}: cannot write (") \
        and "File too large" in lines[-1], out.stdout + out.stderr
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert target.read_text() == "the previous version\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary left beside it


# The same limit under the writers of whole directories (atomic_dir): a toy's trained weights, a
# stored toy checkpoint's copy, a GGUF file's conversion. Their weights go through safetensors,
# whose full-disk error is its own SafetensorError, not an OSError.
FULL_DISK_DIR = textwrap.dedent("""
    import resource, signal, sys, types
    from pathlib import Path
    import polars as pl
    from helpers import tiny_model, word_tokenizer
    from circuitloc.errors import ArtifactError
    from circuitloc.models import gguf
    from circuitloc.models.toy import checkpoint, training
    target, stored = Path(sys.argv[1]), Path(sys.argv[2])
    tok = word_tokenizer()
    model = tiny_model("qwen_gqa", len(tok))
    gguf._load_gguf = lambda path: (model, tok)  # reading a GGUF file is not what is tested here
    run = types.SimpleNamespace(model=model, tok=tok, taught=pl.DataFrame(
        schema={c: pl.String for c in ("subject", "relation", "domain", "answer", "natural")}))
    spec = {"checkpoint": str(stored), "acceptance": {"enforce": False},
            "eval": {"n_ioi": 20, "n_induction": 20, "prefix_len": [4, 8], "suffix_len": [10, 16]}}
    write = {"toy": lambda: training._save(run, target / "toy" / "weights", {}, []),
             "checkpoint": lambda: checkpoint.from_checkpoint(spec, target / "checkpoint" / "weights", log=lambda *a: None),
             "gguf": lambda: gguf.convert_gguf(stored / "model.safetensors", target / "gguf" / "weights")}
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    for kind in write:  # one process for the three: its imports are most of the time
        try:
            write[kind]()
        except ArtifactError as e:
            print(kind, "ArtifactError:", e)
        else:
            print(kind, "no error")
""")


def test_a_weights_directory_that_runs_out_of_disk_is_one_line_and_leaves_nothing(tmp_path):
    """A toy's trained weights, a stored checkpoint's copy and a GGUF conversion, each into a
    directory that holds an earlier version, with too little room."""
    stored = Path(__file__).resolve().parents[2] / ".test" / "models" / "tiny_gqa"
    kinds = ("toy", "checkpoint", "gguf")
    for kind in kinds:
        (tmp_path / kind / "weights").mkdir(parents=True)
        (tmp_path / kind / "weights" / "previous.txt").write_text("the previous version\n")  # kept whole
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", FULL_DISK_DIR, str(tmp_path), str(stored)], capture_output=True,
                         text=True, check=False, env=env, timeout=300)
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.strip()]
    assert [ln.split()[0] for ln in lines] == list(kinds) and "Traceback" not in out.stderr, out.stdout + out.stderr
    for kind, line in zip(kinds, lines):
        target = tmp_path / kind / "weights"
        assert line.startswith(f"{kind} ArtifactError: {target}: cannot write (") and "File too large" in line, line
        assert [p.name for p in target.iterdir()] == ["previous.txt"], kind
        assert [p.name for p in (tmp_path / kind).iterdir()] == ["weights"], kind  # no temporary directory beside it


def test_ioi_resource_and_neutral_text_that_are_not_text_are_named(tmp_path):
    from helpers import word_tokenizer

    from circuitloc.tasks import neutral

    names = tmp_path / "names.txt"
    names.write_bytes(b"Mary\nJo\xe9l\n")  # Latin-1, not UTF-8
    with pytest.raises(DatasetError) as e:
        ioi_templates.resource_lines(names)
    assert "IOI resource file is not UTF-8 text" in _one_line(e, names)
    text = tmp_path / "neutral.txt"
    text.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(DatasetError) as e:
        neutral.windows(text, word_tokenizer(), True)
    assert "neutral text is not UTF-8 text" in _one_line(e, text)
