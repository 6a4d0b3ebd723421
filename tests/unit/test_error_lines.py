"""Config mistakes that used to give a generic message or none until a job ran, each one line now: a
YAML file that does not parse names the file, line and column; a misspelt task gets "did you mean"
(the hf: local-path case: test_hf_names.py; the plan line of a dry run: workflow/test_dry_run_line.py)."""

import pytest
from workflow_helpers import config_error

from circuitloc.errors import ConfigError
from circuitloc.plan.config.configload import load_layer

BAD_INDENT = """\
models:
  tiny_mha:
    source: toy
   family: toy
"""


@pytest.mark.parametrize("text, line, column, problem", [
    (BAD_INDENT, 4, 4, "expected <block end>, but found '<block mapping start>' (while parsing a block mapping "
                       "from line 2); check the indentation"),
    ("seed: 0\n device: cpu\n", 2, 8, "mapping values are not allowed here; check the indentation"),
    ("tasks:\n\tioi: {}\n", 2, 1, "found character '\\t' that cannot start any token"),
    ("ablation: {kinds: [zero, mean}\n", 1, 30, "expected ',' or ']', but got '}'"),
])
def test_a_yaml_error_is_one_line_naming_the_file_line_and_column(tmp_path, text, line, column, problem):
    path = tmp_path / "my.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_layer(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"config file {path}, line {line}, column {column}: not valid YAML: {problem}"), msg


@pytest.mark.parametrize("layer, expected", [
    ({"tasks": {"inductoin": {"n": 30}}}, "config: tasks.inductoin: unknown task 'inductoin' (did you mean "
                                          "'induction'?): expected one of ioi, induction, facts"),
    ({"tasks": {"fact": {"top_k": 3}}}, "config: tasks.fact: unknown task 'fact' (did you mean 'facts'?)"),
    ({"models": {"tiny_mha": {"tasks": {"IOI": None}}}},
     "config: models.tiny_mha.tasks.IOI: unknown task 'IOI'"),
])
def test_a_misspelt_task_gets_did_you_mean(layer, expected):
    msg = config_error(layer)
    assert msg.startswith(expected) and "\n" not in msg, msg


def test_no_did_you_mean_for_a_name_like_no_task():
    msg = config_error({"tasks": {"sentiment": {"n": 10}}})
    assert msg.startswith("config: tasks.sentiment: unknown task 'sentiment': expected one of") and "did you" not in msg


def test_the_configload_command_checks_a_configfile_snakemake_would_parse_first(tmp_path, capsys):
    """Snakemake parses `--configfile` before the workflow loads (its message names no file): the
    command prints this workflow's line for it, and nothing for a file that parses."""
    from circuitloc.plan.config.configload import main

    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(BAD_INDENT)
    good.write_text("seed: 1\n")
    assert main([str(good)]) == 0 and capsys.readouterr().err == ""
    assert main([str(good), str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"config file {bad}, line 4, column 4: not valid YAML: expected <block end>, but found "
                   "'<block mapping start>' (while parsing a block mapping from line 2); check the indentation "
                   "(spaces only, children deeper than their parent)"]
