"""A malformed facts TSV stops Snakemake's dry run with one line naming the file (the checks
themselves: unit/test_user_files_plan.py)."""

import pytest
from workflow_helpers import copy_workflow, smk

from circuitloc.tasks import facts

HEADER = "\t".join(facts.COLUMNS)
ROW = "\t".join(["d", "Mary", "gave", "book", "Mary gave the", "Mary gave the"])


@pytest.mark.workflow
def test_a_malformed_facts_tsv_fails_the_dry_run(tmp_path):
    """One field short on line 3: the dry run stops with the job's own line, before any job."""
    work = copy_workflow(tmp_path / "wf")
    bad = work / "bad_facts.tsv"
    bad.write_text(f"{HEADER}\n{ROW}\n{ROW.rsplit(chr(9), 1)[0]}\n")
    p = smk("-n", "--configfile", ".test/config.yaml", "--config", f"tasks={{facts: {{path: {bad}}}}}", cwd=work,
            check=False)
    assert p.returncode != 0, p.stdout[-2000:]
    assert f"{bad}: line 3 has 5 tab-separated fields, the header has 6" in p.stdout + p.stderr
