"""Report captions read the configured heads-to threshold: rendered as Snakemake
renders them (Jinja2 with a `snakemake` object), a 0.9 threshold says 90% and heads_to_90 everywhere."""

from types import SimpleNamespace

import jinja2
import pytest
from workflow_helpers import ROOT

CAPTIONS = sorted((ROOT / "report").glob("*.rst"))


def _render(path, threshold):
    snakemake = SimpleNamespace(config={"curves": {"threshold": threshold}},
                                wildcards=SimpleNamespace(task="ioi", ablation="zero-query"), params=SimpleNamespace())
    return jinja2.Environment().from_string(path.read_text()).render(snakemake=snakemake)


@pytest.mark.parametrize("path", CAPTIONS, ids=lambda p: p.name)
def test_captions_name_the_configured_threshold(path):
    at_80, at_90 = _render(path, 0.8), _render(path, 0.9)
    assert "80%" not in at_90 and "heads_to_80" not in at_90 and "0.8 " not in at_90
    if "heads-to" in at_80.lower() or "heads_to" in at_80:
        assert ("90%" in at_90 or "heads_to_90" in at_90), path.name
        assert at_90.replace("0.9", "0.8").replace("90", "80") == at_80.replace("90", "80")  # nothing else differs
