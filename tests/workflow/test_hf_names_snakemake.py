"""`hf:` in a dry run: a path that does not exist stops the plan naming models.<name>.hf, and a hub
id without an owner plans its model (what counts as a hub id: unit/test_hf_names.py)."""

from workflow_helpers import planned_jobs, smk


def _dry_run(tmp_path, hf):
    cfg = tmp_path / "names.yaml"
    cfg.write_text(f"models:\n  mine: {{source: hf, hf: {hf}, family: t}}\n")
    return smk("results/models/mine/card.json", "-n", "--nolock", "--configfile", str(cfg), check=False)


def test_a_missing_local_path_stops_the_plan_naming_the_field(tmp_path):
    p = _dry_run(tmp_path, str(tmp_path / "nowhere" / "model"))
    assert p.returncode != 0
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if "models.mine.hf" in ln]
    assert lines and f"local directory {tmp_path / 'nowhere' / 'model'} does not exist" in lines[0]
    assert planned_jobs(p.stdout) == []


def test_a_hub_id_without_an_owner_plans_its_model(tmp_path):
    p = _dry_run(tmp_path, "gpt2")
    assert p.returncode == 0, p.stderr[-2000:]
    assert ("model_hf", {"model": "mine"}) in planned_jobs(p.stdout)
