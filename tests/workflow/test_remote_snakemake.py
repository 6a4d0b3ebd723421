"""A Snakefile read from a URL plans: its configs, schema, resources, report pages and scripts are
read through Snakemake's source path (circuitloc.plan.config.source), not from the local file system."""

import yaml
from workflow_helpers import ROOT, planned_jobs, served, smk

from circuitloc.plan.jobs.codehash import code_hash


def test_a_snakefile_served_over_http_plans_the_tiny_config(tmp_path):
    # the test config, its files named from the run directory (the checkout's .test/ is not beside it)
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    for spec in cfg["models"].values():
        if "toy" in spec and "checkpoint" in spec["toy"]:
            spec["toy"]["checkpoint"] = str(ROOT / spec["toy"]["checkpoint"])
    if "source" in cfg["tasks"]["ioi"] and "path" in cfg["tasks"]["ioi"]["source"]:
        cfg["tasks"]["ioi"]["source"]["path"] = str(ROOT / cfg["tasks"]["ioi"]["source"]["path"])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    with served(ROOT) as url:
        remote = smk("-s", f"{url}/Snakefile", "-n", "--configfile", "run.yaml", cwd=tmp_path)
    local = smk("-s", str(ROOT / "Snakefile"), "-n", "--configfile", "run.yaml", cwd=tmp_path)
    jobs = planned_jobs(remote.stdout)
    assert jobs and sorted(map(str, jobs)) == sorted(map(str, planned_jobs(local.stdout)))
    # each script was fetched to be hashed, and its hash (from the fetched text) is the checkout's
    mirrored = sorted((tmp_path / ".snakemake" / "circuitloc" / "source").glob("*/workflow/scripts/*.py"))
    assert {f.name for f in mirrored} >= {"score.py", "curve.py", "tables.py", "_src_path.py"}
    for f in mirrored:
        assert code_hash(f) == code_hash(ROOT / "workflow" / "scripts" / f.name), f.name
