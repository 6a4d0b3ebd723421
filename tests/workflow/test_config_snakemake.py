"""The config through Snakemake: given on the command line it plans the default's jobs, and a typo
stops the run naming the key and its path (the schema's defaults themselves: unit/test_config.py)."""

from workflow_helpers import planned_jobs, smk


def _counts(out):
    return sorted((rule, tuple(sorted(wc.items()))) for rule, wc in planned_jobs(out))


def test_config_on_the_command_line_plans_the_defaults_jobs():
    plain = _counts(smk("-n", "--nolock").stdout)
    assert len(plain) > 50
    assert _counts(smk("-n", "--nolock", "--config", "device=cpu").stdout) == plain
    # an overlay file adds to the default: the same jobs (only the facts jobs' params differ)
    assert _counts(smk("-n", "--nolock", "--configfile", "config/facts_accuracy.yaml").stdout) == plain


def test_a_typo_stops_the_run_naming_key_and_path(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("models:\n  toy_mha:\n    source: toy\n    toy: {steps: 10}\n"
                   "    tasks: {induction: {n_scroe: 20}}\n")
    p = smk("-n", "--nolock", "--configfile", str(bad), check=False)
    assert p.returncode != 0
    assert "config: models.toy_mha.tasks.induction: unknown key 'n_scroe'" in p.stdout + p.stderr
