"""The user's data files and settings that a job would trip on are checked when the run is planned:
a malformed facts TSV or IOI parquet, or a seed numpy's sampler does not take, stops the plan
with one line naming the file (and line) or the key (in Snakemake's dry run:
workflow/test_user_files_snakemake.py)."""

import os
import shutil

import pytest
import yaml
from workflow_helpers import ROOT, TEST_CONFIG, config_error, resolve_over_test_config

from circuitloc.errors import ConfigError, DatasetError
from circuitloc.plan.config.userfiles import MAX_LINE, check_parquet, facts_lines
from circuitloc.tasks import facts

HEADER = "\t".join(facts.COLUMNS)
ROW = "\t".join(["d", "Mary", "gave", "book", "Mary gave the", "Mary gave the"])


@pytest.mark.parametrize("text, message", [
    (f"{HEADER}\n{ROW}\n" + "x" * (MAX_LINE + 1) + "\n", f"line 3 has {MAX_LINE + 1} characters, more than"),
    (f"domain\tsubject\n{ROW}\n", "missing columns ['relation', 'answer', 'natural', 'qa']"),
    (f"{HEADER}\n", "no facts (a header and no rows)"),
    (b"\xff\xfe" + HEADER.encode(), "not UTF-8 text"),
])
def test_facts_file_problems_are_one_line_at_plan_and_job_time(tmp_path, text, message):
    f = tmp_path / "facts.tsv"
    (f.write_bytes if isinstance(text, bytes) else f.write_text)(text)
    for error in (ConfigError, DatasetError):
        with pytest.raises(error, match=rf"^{f}: .*") as e:
            facts_lines(f, error)
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DatasetError, match=rf"^{f}: "):  # the job reads it through the same check
        facts.load(f)


def test_an_ioi_parquet_is_checked_for_its_frame_and_column(tmp_path):
    import polars as pl

    good = tmp_path / "ioi.parquet"
    pl.DataFrame({"ioi_sentences": ["Then, Mary and John went to the store. John gave a drink to Mary"]}) \
        .write_parquet(good)
    check_parquet(good, "ioi_sentences")
    other = tmp_path / "other.parquet"
    pl.DataFrame({"text": ["a"]}).write_parquet(other)
    with pytest.raises(ConfigError, match=rf"^{other}: expected a column 'ioi_sentences'"):
        check_parquet(other, "ioi_sentences")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(ConfigError, match=rf"^{cut}: not a readable parquet file, truncated or corrupt"):
        check_parquet(cut, "ioi_sentences")
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"empty file \(0 bytes\)"):
        check_parquet(tmp_path / "empty.parquet", "ioi_sentences")


def test_the_parquet_column_is_matched_by_its_name_not_as_a_substring(tmp_path):
    """`ioi_sentences_old` (or a nested field, or metadata that spells the name) is not the column."""
    import polars as pl

    old = tmp_path / "old.parquet"
    pl.DataFrame({"ioi_sentences_old": ["a"], "n": [1]}).write_parquet(old)
    with pytest.raises(ConfigError) as e:
        check_parquet(old, "ioi_sentences")
    assert str(e.value) == (f"{old}: expected a column 'ioi_sentences', its schema has none of that name (its "
                            "columns: 'ioi_sentences_old', 'n')")
    nested = tmp_path / "nested.parquet"
    pl.DataFrame({"s": [{"ioi_sentences": "a"}]}).write_parquet(nested)
    with pytest.raises(ConfigError, match=r"its columns: 's'\)$"):
        check_parquet(nested, "ioi_sentences")
    many = tmp_path / "many.parquet"
    pl.DataFrame({"x": [[1]], "ioi_sentences": ["a"], **{f"c{i}": [i] for i in range(20)}}).write_parquet(many)
    check_parquet(many, "ioi_sentences")  # after a list column: found among the top-level columns


def test_a_seed_numpys_sampler_does_not_take_is_refused_at_plan_time():
    assert "seed" in config_error({"seed": 2**32})


def _with_model(name, **changes):
    """The test config's models with `changes` merged into models.<name> (a layer's models replace
    the test config's: all of them are given)."""
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    return {"models": {**models, name: {**models[name], **changes}}}


def test_a_missing_user_file_stops_the_plan_naming_its_key_and_path(tmp_path):
    """Whether or not a run's outputs exist (Snakemake would skip a missing input whose consumers'
    outputs exist, keeping the old file's numbers): one line naming the key and the path, for the
    facts TSV, the IOI parquet (run-wide and a model's own), a stored toy's checkpoint folder and a
    file of it, and the specificity text."""
    gone = tmp_path / "gone"
    assert config_error({"tasks": {"facts": {"path": f"{gone}.tsv"}}}) == \
        f"config: tasks.facts.path: file not found: {gone}.tsv"
    assert config_error({"tasks": {"ioi": {"source": {"kind": "fahamu", "path": f"{gone}.parquet"}}}}) == \
        f"config: tasks.ioi.source.path: file not found: {gone}.parquet"
    own = _with_model("tiny_gqa", tasks={"ioi": {"source": {"kind": "fahamu", "path": f"{gone}.parquet"}}})
    assert config_error(own) == f"config: models.tiny_gqa.tasks.ioi.source.path: file not found: {gone}.parquet"
    toy = yaml.safe_load(TEST_CONFIG.read_text())["models"]["tiny_mha"]["toy"]
    assert config_error(_with_model("tiny_mha", toy={**toy, "checkpoint": str(gone)})) == \
        f"config: models.tiny_mha.toy.checkpoint: directory not found: {gone}"
    partial = tmp_path / "partial"
    shutil.copytree(ROOT / ".test" / "models" / "tiny_mha", partial)
    (partial / "model.safetensors").unlink()
    assert config_error(_with_model("tiny_mha", toy={**toy, "checkpoint": str(partial)})).startswith(
        f"config: models.tiny_mha.toy.checkpoint: {partial} has no model.safetensors (a stored toy's files: ")
    assert config_error({"neutral_text": f"{gone}.txt"}) == f"config: neutral_text: file not found: {gone}.txt"
    # another file that exists plans (the dataset job reruns on the new path: workflow/test_inputs.py)
    shutil.copy(ROOT / "resources" / "facts" / "facts.tsv", tmp_path / "facts.tsv")
    assert resolve_over_test_config({"tasks": {"facts": {"path": str(tmp_path / "facts.tsv")}}})


def test_every_file_a_job_reads_that_no_job_writes_is_listed_with_its_key():
    """plan.config.userfiles.user_inputs: the same files as the rules' inputs (plan.jobs.inputs), each with the key
    that points at it, or None for a file shipped with circuitloc."""
    from circuitloc.plan.jobs.inputs import resource_path
    from circuitloc.plan.config.userfiles import user_inputs

    config = resolve_over_test_config({})
    listed = {(key, name, path) for key, name, path in user_inputs(config, ROOT)}
    assert ("tasks.ioi.source.path", "fahamu", ".test/ioi_fahamu.parquet") in listed
    assert ("models.tiny_gqa.toy.checkpoint", "checkpoint_1", ".test/models/tiny_gqa/model.safetensors") in listed
    assert (None, "facts", resource_path(ROOT, "facts", "facts.tsv")) in listed
    assert (None, "neutral", resource_path(ROOT, "neutral.txt")) in listed
    assert all(os.path.isfile(path) for _, _, path in listed)
