"""The workflow as a user runs it: lint, dry runs, a tiny end-to-end run with artifact-level
regression against stored tables, and 'only what changed is recomputed'."""

import os
import re

import pandas as pd
import pytest
import yaml
from workflow_helpers import ROOT, smk

EXPECTED = ROOT / ".test" / "expected"
RTOL, ATOL = 1e-3, 1e-4  # same machine type, one torch thread: differences are float summation order


def test_lint_is_clean():
    p = smk("--lint", check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Lints for" not in out, out


def test_paper_config_dry_run_builds_the_dag_offline():
    p = smk("-n", "--configfile", "config/paper.yaml")
    out = p.stdout + p.stderr
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert int(stats["model"]) == 6
    abl = 3 * 2  # zero, mean, resample x query, kv
    assert int(stats["scores"]) == 6 * 4 * abl  # ioi, induction, facts, facts_shared
    assert int(stats["tables"]) == 4 * abl
    assert int(stats["specificity"]) == 6 * abl and int(stats["stability"]) == 3
    assert int(stats["robustness"]) == 1


def test_schema_error_names_the_field(tmp_path):
    bad = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    bad["models"]["tiny_mha"]["source"] = "bogus"
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    p = smk("-n", "--configfile", str(cfg), check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "bogus" in out and "source" in out


# tiny_run: tests/conftest.py (one run shared with the report and SLURM tests)


@pytest.mark.workflow
@pytest.mark.parametrize("table", ["table1_ioi_zero-query", "table2_ioi_zero-query", "table1_induction_zero-query",
                                   "table1_facts_zero-query", "table1_facts_shared_zero-query",
                                   "table1_ioi_mean-kv", "table1_induction_resample-query", "robustness",
                                   "specificity", "stability_ioi", "stability_facts"])
def test_tables_match_stored_expected(tiny_run, table):
    got = pd.read_csv(tiny_run / "results" / "tables" / f"{table}.csv", dtype={"top_head": str})
    assert len(got) > 0
    exp_path = EXPECTED / f"{table}.csv"
    if os.environ.get("CIRCUITLOC_UPDATE_EXPECTED"):
        EXPECTED.mkdir(exist_ok=True)
        got.to_csv(exp_path, index=False)
    exp = pd.read_csv(exp_path, dtype={"top_head": str})
    assert list(got.columns) == list(exp.columns)
    for col in exp.columns:
        if exp[col].dtype.kind in "fi":
            pd.testing.assert_series_equal(got[col].astype(float), exp[col].astype(float), rtol=RTOL, atol=ATOL,
                                           check_names=False)
        else:
            assert got[col].astype(str).tolist() == exp[col].astype(str).tolist(), col


@pytest.mark.workflow
def test_every_artifact_exists_and_cards_are_complete(tiny_run):
    import json

    res = tiny_run / "results"
    for m in ("tiny_mha", "tiny_gqa"):
        card = json.loads((res / "models" / m / "card.json").read_text())
        for key in ("name", "source", "family", "attention", "n_layers", "n_heads", "n_kv_heads", "d_model",
                    "d_head", "n_params", "dtype", "tokenizer", "prepend_bos", "checks"):
            assert key in card, key
    assert json.loads((res / "models/tiny_gqa/card.json").read_text())["attention"] == "gqa"
    for fig in ("fig1_heatmap_ioi_zero-query", "fig2_curves_ioi_zero-query", "fig1_heatmap_induction_zero-query",
                "scale_zero-query", "fig2_curves_ioi_resample-kv", "stability_ioi", "stability_induction",
                "stability_facts"):
        assert (res / "figures" / f"{fig}.png").stat().st_size > 10_000, fig
    scores = pd.read_parquet(res / "scores/ioi/tiny_gqa/zero-query.parquet")
    assert {"layer", "head", "unit", "ld_clean", "ld_ablated", "drop", "damage", "drop_lo", "drop_hi",
            "top_freq"} <= set(scores.columns)
    assert len(scores) == 2 * 4
    assert (scores["drop_lo"] <= scores["drop"] + 1e-9).all() and (scores["drop"] <= scores["drop_hi"] + 1e-9).all()
    assert len(pd.read_parquet(res / "scores/ioi/tiny_gqa/zero-kv.parquet")) == 2 * 1  # one kv head per layer
    per_prompt = pd.read_parquet(res / "scores/ioi/tiny_gqa/zero-query.prompts.parquet")
    assert len(per_prompt) == 10 and list(per_prompt.columns[:2]) == ["row", "clean"]
    # the unit table is the mean of the per-prompt table
    assert abs(per_prompt["L0H0"].mean() - scores.set_index("unit").loc["L0H0", "ld_ablated"]) < 1e-5
    curve = pd.read_parquet(res / "curves/ioi/tiny_gqa/mean-query.parquet")
    ranked = curve[curve["method"] == "ranked"]
    assert ranked["damage_lo"].notna().all() and (ranked["damage_lo"] <= ranked["damage_hi"]).all()
    assert not (res / "scores/ioi/tiny_mha/mean-query.parquet").exists()  # not in tiny_mha's kinds
    md = (res / "tables/table1_ioi_zero-query.md").read_text()
    assert "tiny_mha" in md and "heads_to_80" in md
    leftovers = [p for p in res.rglob(".*") if p.is_file()]
    assert not leftovers, leftovers  # no temporary file survives


@pytest.mark.workflow
def _planned_jobs(dry_run_output: str) -> list[tuple[str, dict]]:
    """(rule, wildcards) for every job a dry run lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if m:
            wc = re.search(r"wildcards: (.*)", block)
            jobs.append((m.group(1), dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {}))
    return jobs


def test_changing_one_model_reruns_only_its_jobs(tiny_run):
    cfg = yaml.safe_load((tiny_run / ".test" / "config.yaml").read_text())
    assert _planned_jobs(smk("-n", "--configfile", ".test/config.yaml", cwd=tiny_run).stdout) == []
    cfg["models"]["tiny_gqa"]["toy"]["steps"] += 1
    changed = tiny_run / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    jobs = _planned_jobs(smk("-n", "--configfile", str(changed), cwd=tiny_run).stdout)
    per_model = [(rule, wc) for rule, wc in jobs if "model" in wc]
    assert ("model", {"model": "tiny_gqa"}) in per_model
    for rule, wc in per_model:
        # the other model's only reruns: the shared-facts condition, which depends on its whole family
        assert wc["model"] == "tiny_gqa" or wc.get("task") == "facts_shared" or rule == "dataset_shared_facts", \
            (rule, wc)
    assert not any(rule == "model" and wc["model"] == "tiny_mha" for rule, wc in per_model)
    assert {"tables", "figures", "figure_scale", "robustness", "stability", "specificity_table"} <= \
        {rule for rule, _ in jobs}  # the tables that include it
