"""The workflow as a user runs it: lint, dry runs, a tiny end-to-end run with artifact-level
regression against stored tables, and 'only what changed is recomputed'."""

import os
import platform
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, planned_jobs, reuse_models, smk

from circuitloc.stats import Bootstrap, drop_intervals

EXPECTED = ROOT / ".test" / "expected"
# unit labels (L0H3, L1G0, L2) read as text
TEXT = {"top_head": str, "top_kv_group": str, "top_layer": str}
GOLDEN_TABLES = ["table1_ioi_zero-query", "table2_ioi_zero-query", "table1_induction_zero-query",
                 "table1_facts_zero-query", "table1_facts_shared_zero-query", "table1_ioi_mean-kv",
                 "table1_ioi_mean-query", "table1_induction_resample-query", "table1_facts_resample-query", "robustness", "specificity",
                 "stability_ioi", "stability_facts"]
# What the variant run rescores (every task and kind, Table 2; the cross-model tables would rescore
# everything and double the test's cost), on tiny_gqa alone and its query heads: a KV group is a set
# of query heads on the same path, so the kinds are what batch splits could change (resample's
# draws, mean's averages); its rows are compared with the goldens' tiny_gqa rows
VARIANT_KINDS = ["zero", "mean", "resample"]
VARIANT_TABLES = ["table1_ioi_zero-query", "table2_ioi_zero-query", "table1_facts_zero-query",
                  "table1_ioi_mean-query", "table1_induction_resample-query"]

# The goldens must hold on any CPU (x86-64 or ARM, any vector width) and any number of torch threads,
# where float32 sums come out in another order. The models are stored trained checkpoints
# (.test/models), so only scoring differs between machines, never training. Per column, first match:
# (pattern, rtol, atol, why). Columns that match none (names, counts, units, heads-to-80%, verdicts,
# accuracies, overlaps) must be equal: they change only if float noise crosses a decision, which the
# trained toys' margins rule out (test_goldens_hold_under_other_batches_threads_and_kernels checks it).
TOLERANCES = [
    (r"top_freq$", 0.0, 0.0051,
     "share of 200 bootstrap resamples in which a unit is top: one resample may flip on a near tie"),
    (r"(pct|pct_lo|pct_hi|pct_mean|pct_max|pct_heldout|pct_heldout_lo|pct_heldout_hi)$", 1e-4, 1e-3,
     "100 x drop / (clean - floor): every golden's clean metric is far from its floor (asserted), so "
     "1e-5 of noise in a drop moves it by < 1e-3 points"),
    (r"^(damage_\w+|top_head_damage)$", 1e-4, 1e-5, "drop / (clean - floor), as the pct columns without the 100"),
    (r"^(\w+_)?(top_share|effective_units)$", 1e-4, 1e-6,
     "continuous in the drops (drops below 1e-6 of the largest are ignored, not cut at exactly 0)"),
    (r"^spearman$", 0.0, 1e-9, "a rank statistic: equal unless two unit scores swap order"),
    (r"curve_area$", 1e-4, 1e-5, "the mean of damages over the curve's steps (each as the damage columns)"),
    (r"(^|_)(cpr|cmd)$", 1e-4, 1e-5,
     "trapezoids over ten faithfulness ratios, each a metric difference over clean - all-ablated (order 1)"),
    (r"(baseline_\w+|_clean|_ablated|ld_\w+|_score|_score_lo|_score_hi|_score_heldout)$", 1e-5, 1e-5,
     "a raw metric or drop in logits or nats (order 0.1-10): float32 summation order moves it by ~1e-6"),
]
# columns that must hold exactly although numeric: discrete by construction
EXACT = r"^(n_\w+|curve_prompts|control_draws|\w*heads_to_80\w*|aligned|baseline_accuracy|\w*coverage|" \
        r"\w*overlap|mha_models|gqa_models|no_task_behaviour|curve_area_covered|damage_na|damage_note|\w*ci_note)$"


def tolerance(col: str):
    """(rtol, atol) for a numeric column of a golden table, or None where it must be equal."""
    if re.match(EXACT, col):
        return None
    for pattern, rtol, atol, _why in TOLERANCES:
        if re.search(pattern, col):
            return rtol, atol
    raise AssertionError(f"golden column {col!r} has no stated tolerance: add it to TOLERANCES or EXACT")


def assert_matches_expected(got: pd.DataFrame, table: str, models=None):
    """`got` equals the golden `table` within each column's tolerance; `models`: only those models'
    rows of the golden (a run of fewer models)."""
    exp = pd.read_csv(EXPECTED / f"{table}.csv", dtype=TEXT)
    if models is not None:
        exp = exp[exp["model"].isin(models)].reset_index(drop=True)
        assert len(exp), (table, models)
    assert list(got.columns) == list(exp.columns), table
    assert len(got) == len(exp), table
    for col in exp.columns:
        tol = tolerance(col) if exp[col].dtype.kind in "fi" and got[col].dtype.kind in "fi" else None
        if tol is None:
            assert got[col].astype(str).tolist() == exp[col].astype(str).tolist(), (table, col)
        else:
            np.testing.assert_allclose(got[col].astype(float), exp[col].astype(float), rtol=tol[0], atol=tol[1],
                                       equal_nan=True, err_msg=f"{table}.{col}")


def read_table(run_dir, table: str) -> pd.DataFrame:
    return pd.read_csv(run_dir / "results" / "tables" / f"{table}.csv", dtype=TEXT)


def test_lint_is_clean():
    p = smk("--lint", check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Lints for" not in out, out


def test_paper_config_dry_run_builds_the_dag_offline():
    p = smk("-n", "--configfile", "config/paper.yaml")
    out = p.stdout + p.stderr
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert int(stats["model_hf"]) == 6 and "model" not in stats  # hf models: a card, no weights of their own
    # ioi, induction, facts, facts_shared; group_ablations: true, so one job per model and task runs
    # all six ablations (zero, mean, resample x query, kv) on one model load (bench/loads.py)
    def jobs(stage):
        return sum(int(v) for k, v in stats.items() if re.fullmatch(rf"{stage}(__\w+)?", k))

    assert jobs("scores") == jobs("curves") == 6 * 4 and int(stats["scores"]) == 6 * 4
    assert int(stats["tables"]) == 4 and int(stats["figures"]) == 4  # one job per task: all its ablations
    assert jobs("specificity") == 6 and int(stats["stability"]) == 3
    assert int(stats["robustness"]) == 1


def test_bench_loads_counts_one_load_per_model_job_and_one_hash_per_model():
    """bench/loads.py on the paper's config, per ablation and grouped: every score, curve and
    specificity job and the facts dataset job loads the model once; stamped, each model's weights
    are hashed once (by its model job), else once more per load."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("loads", ROOT / "bench" / "loads.py")
    loads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loads)
    own = loads.own_weights_models("config/paper.yaml", [])
    for grouped, per_task in (("false", 6), ("true", 1)):
        jobs = loads.planned_jobs("config/paper.yaml", [f"group_ablations={grouped}"])
        counts = loads.count(jobs, {"facts"}, own)
        assert len(counts) == 6 and not own  # the paper's models are all hub models
        for c in counts.values():  # 4 task conditions x (score + curve) + specificity, + facts' dataset
            assert c["loads"] == 4 * 2 * per_task + per_task + 1
            assert c["hash_every_load"] == c["loads"] + 1 and c["hash_once"] == 1


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
@pytest.mark.parametrize("table", GOLDEN_TABLES)
def test_tables_match_stored_expected(tiny_run, table):
    got = read_table(tiny_run, table)
    assert len(got) > 0
    if os.environ.get("CIRCUITLOC_UPDATE_EXPECTED"):
        EXPECTED.mkdir(exist_ok=True)
        got.to_csv(EXPECTED / f"{table}.csv", index=False)
    assert_matches_expected(got, table)


def test_goldens_are_well_conditioned():
    """The goldens come from toys that learned their tasks: every percentage divides by a clean metric
    far from its floor, heads-to-80% is reached, greedy differs from ranked somewhere, and Table 2
    holds a sign flip or a clear non-flip (a bug in any of these steps would change a golden)."""
    for table in GOLDEN_TABLES:
        exp = pd.read_csv(EXPECTED / f"{table}.csv", dtype=TEXT)
        for col in exp.columns:
            if exp[col].dtype.kind in "fi":
                tolerance(col)  # every numeric column has a stated tolerance
        for col in [c for c in exp.columns if c.startswith("baseline_") or c == "ld_clean"]:
            floor_distance = 1.0 - exp[col] if col == "baseline_icl_loss" else exp[col]
            if col != "baseline_icl_loss":
                assert (exp[col].abs() > 0.5).all(), (table, col, exp[col].tolist())
            else:
                assert (exp[col] < 0.5).all(), (table, col)  # induction learned; its floor is the no-repeat loss
            assert floor_distance.notna().all()
    t1 = pd.concat([pd.read_csv(EXPECTED / f"{t}.csv", dtype=TEXT)
                    for t in GOLDEN_TABLES if t.startswith("table1_")])
    assert not t1["heads_to_80_bounded"].all()  # the 80% threshold is crossed
    reached = ~t1["heads_to_80_bounded"] & ~t1["heads_to_80_greedy_bounded"]  # '> 8' vs '> 6' are two bounds
    assert (t1["heads_to_80"] != t1["heads_to_80_greedy"])[reached].any()  # greedy != ranked where both cross 80%
    t2 = pd.read_csv(EXPECTED / "table2_ioi_zero-query.csv")
    assert (t2["ld_clean"] > 2).all()


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
    assert len(scores) == 2 * 8  # 2 layers x 8 query heads
    assert (scores["drop_lo"] <= scores["drop"] + 1e-9).all() and (scores["drop"] <= scores["drop_hi"] + 1e-9).all()
    assert len(pd.read_parquet(res / "scores/ioi/tiny_gqa/zero-kv.parquet")) == 2 * 2  # two kv heads per layer
    per_prompt = pd.read_parquet(res / "scores/ioi/tiny_gqa/zero-query.prompts.parquet")
    assert len(per_prompt) == 10 and list(per_prompt.columns[:3]) == ["row", "floor", "clean"]
    # induction's floor is measured per prompt and saved there, so its intervals rebuild from that file alone
    ind = pd.read_parquet(res / "scores/induction/tiny_gqa/zero-query.prompts.parquet")
    ind_scores = pd.read_parquet(res / "scores/induction/tiny_gqa/zero-query.parquet").set_index("unit")
    assert ind["floor"].nunique() > 1
    units = [c for c in ind.columns if c not in ("row", "floor", "clean")]
    iv = drop_intervals(ind["clean"].to_numpy(), ind[units].to_numpy().T, False, Bootstrap(200, 0),
                        floor=ind["floor"].to_numpy())
    assert np.allclose(iv["damage_lo"], ind_scores.loc[units, "damage_lo"], atol=1e-6)
    assert np.allclose(iv["damage_hi"], ind_scores.loc[units, "damage_hi"], atol=1e-6)
    # the unit table is the mean of the per-prompt table
    assert abs(per_prompt["L0H0"].mean() - scores.set_index("unit").loc["L0H0", "ld_ablated"]) < 1e-5
    curve = pd.read_parquet(res / "curves/ioi/tiny_gqa/mean-query.parquet")
    ranked = curve[curve["method"] == "ranked"]
    assert ranked["damage_lo"].notna().all() and (ranked["damage_lo"] <= ranked["damage_hi"]).all()
    assert not (res / "scores/ioi/tiny_mha/mean-query.parquet").exists()  # not in tiny_mha's kinds
    suff = curve[curve["method"] == "sufficiency"]
    assert suff["kept"].tolist() == [0, 0, 0, 0, 0, 0, 1, 3, 8, 16]  # int(fraction x 16 query heads)
    assert suff["faithfulness"].iloc[-1] == pytest.approx(1.0) and suff["faithfulness"].iloc[0] == 0
    mib = json.loads((res / "mib/ioi/zero-kv/ioi_tiny_gqa/importances.json").read_text())
    assert {"cfg", "nodes", "edges"} <= set(mib) and mib["nodes"]["a0.h0"]["score"] == mib["nodes"]["a0.h3"]["score"]
    md = (res / "tables/table1_ioi_zero-query.md").read_text()
    assert "tiny_mha" in md and "heads-to-80% (greedy)" in md and md.splitlines()[2].count("|") <= 13  # <= 12 columns
    # no temporary file survives (Snakemake's own marker in a directory() output, the weights, is no temporary)
    leftovers = [p for p in res.rglob(".*") if p.is_file() and p.name != ".snakemake_timestamp"]
    assert not leftovers, leftovers
    assert (res / "models/tiny_gqa/weights/config.json").is_file()  # the declared directory() output
    # the cost table sums every job of the run's DAG: each benchmark file the run wrote, once (but its own)
    cost = pd.read_csv(res / "tables/cost.csv")
    total = cost[(cost["stage"] == "all") & (cost["model"] == "all")]["jobs"].item()
    assert total == len([p for p in (res / "benchmarks").rglob("*.tsv") if p.name != "cost.tsv"]) > 40


@pytest.mark.workflow
def test_changing_one_model_reruns_only_its_jobs(tiny_run):
    cfg = yaml.safe_load((tiny_run / ".test" / "config.yaml").read_text())
    assert planned_jobs(smk("-n", "--configfile", ".test/config.yaml", cwd=tiny_run).stdout) == []
    toy = cfg["models"]["tiny_gqa"]["toy"]  # a model-stage setting of one model (a copy: YAML merges share)
    toy["eval"] = {**toy["eval"], "n_ioi": toy["eval"]["n_ioi"] + 1}
    changed = tiny_run / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    jobs = planned_jobs(smk("-n", "--configfile", str(changed), cwd=tiny_run).stdout)
    per_model = [(rule, wc) for rule, wc in jobs if "model" in wc]
    assert ("model", {"model": "tiny_gqa"}) in per_model
    for rule, wc in per_model:
        # the other model's only reruns: the shared-facts condition, which depends on its whole family
        assert wc["model"] == "tiny_gqa" or wc.get("task") == "facts_shared" or rule == "dataset_shared_facts", \
            (rule, wc)
    assert not any(rule == "model" and wc["model"] == "tiny_mha" for rule, wc in per_model)
    assert {"tables", "figures", "figure_scale", "robustness", "stability", "specificity_table"} <= \
        {rule for rule, _ in jobs}  # the tables that include it


@pytest.mark.workflow
@pytest.mark.long(50)
def test_goldens_hold_under_other_batches_threads_and_kernels(tiny_run, tmp_path):
    """Summation order exercised on every machine: the datasets and scoring of VARIANT_TABLES rerun on
    tiny_gqa's stored model with another max_batch_tokens (other batch splits), 2 torch threads per
    job and, on x86-64, AVX2 kernels instead of the widest the CPU has, all of a model's stages in one
    job (group_stages: the sweep's way); the tables must match the goldens within the same
    tolerances."""
    work = copy_workflow(tmp_path / "wf")
    reuse_models(tiny_run, work, ("tiny_gqa",))
    for f in (work / "results" / "models" / "tiny_gqa").rglob("*"):
        os.utime(f)  # newer than the copied checkout's toys (a shared run older than it): scored, not rebuilt
    cfg = yaml.safe_load((work / ".test" / "config.yaml").read_text())
    cfg["max_batch_tokens"] = 1000
    cfg["models"] = {"tiny_gqa": {**cfg["models"]["tiny_gqa"], "ablation": {"kinds": VARIANT_KINDS, "units": ["query"]}}}
    cfg["group_stages"] = True  # a family of one: no shared condition
    (work / "variant.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # two threads beside the other test worker's jobs: idle threads sleep instead of spinning (the
    # numbers do not depend on it, the other worker's time does)
    env = {"OMP_WAIT_POLICY": "PASSIVE"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        env["ATEN_CPU_CAPABILITY"] = "avx2"
    from workflow_helpers import smk_env

    targets = [f"results/tables/{t}.csv" for t in VARIANT_TABLES]
    # targets first: --configfile and --set-threads each take every word that follows them
    smk(*targets, "--cores", "2", "--configfile", "variant.yaml", "--set-threads", "model_stages=2",
        "specificity=2", cwd=work, env=smk_env(**env), timeout=1500)
    assert not (work / "results" / "logs" / "models").exists(), "the variant must score the same models"
    logs = work / "results" / "logs"
    assert (logs / "model_stages" / "tiny_gqa.log").is_file() and not (logs / "scores").exists()
    for table in VARIANT_TABLES:
        assert_matches_expected(read_table(work, table), table, models=["tiny_gqa"])


@pytest.mark.workflow
@pytest.mark.long(30)
def test_threshold_reaches_every_heads_to_column(tiny_run, tmp_path):
    """`curves.threshold: 0.9` over the tiny config renames and recomputes every heads-to column
    (heads_to_90, its greedy twin, the robustness sides: greedy, the tiny config draws it), the markdown titles and
    the scale figure. Every job's params carry the config today, so a threshold change would rerun
    the whole DAG: the test reruns only the table and figure rules (mtime triggers, forced rules).
    Captions: tests/unit/test_captions.py."""
    work = tmp_path / "t90"
    shutil.copytree(tiny_run, work, symlinks=True)
    overlay = tmp_path / "t90.yaml"
    overlay.write_text(yaml.safe_dump({"curves": {"threshold": 0.9}}))
    targets = ["results/tables/table1_ioi_zero-query.csv", "results/tables/robustness.csv",
               "results/figures/scale_zero-query.png"]
    args = [*targets, "--configfile", ".test/config.yaml", str(overlay), "--rerun-triggers", "mtime",
            "--forcerun", "tables", "robustness", "figure_scale"]
    run = smk("--cores", "1", *args, cwd=work)  # the jobs it ran, as a dry run would list them
    rules = {rule for rule, _ in planned_jobs(run.stdout + run.stderr)}
    assert rules and not {r for r in rules if r.startswith(("scores", "curves", "model", "dataset"))}, rules
    t1, rob = read_table(work, "table1_ioi_zero-query"), read_table(work, "robustness")
    assert {"heads_to_90", "heads_to_90_bounded", "heads_to_90_greedy", "heads_to_90_frac"} <= set(t1.columns)
    assert not [c for c in list(t1.columns) + list(rob.columns) if "heads_to_80" in c]
    assert {"mha_heads_to_90_greedy_frac", "gqa_heads_to_90_greedy_frac"} <= set(rob.columns)
    old = read_table(tiny_run, "table1_ioi_zero-query")
    assert (t1["heads_to_90"].fillna(-1) >= old["heads_to_80"].fillna(-1)).all()  # a higher bar: never fewer units
    md = (work / "results" / "tables" / "table1_ioi_zero-query.md").read_text()
    assert "heads-to-90%" in md and "80%" not in md
