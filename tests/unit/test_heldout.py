"""Selection and estimate on different prompts: units are ranked (and the top unit chosen) on the
scoring rows; curves, Table 2 and the top unit's held-out score run on rows disjoint from them. And
the facts metric the ranking uses (config tasks.facts.metric, margin by default)."""

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from helpers import card_for, ioi_shaped
from workflow_helpers import ROOT

from circuitloc import io
from circuitloc.engine import pipeline
from circuitloc.engine.settings import CurveFiles, CurveSettings, JobSettings, ScoreFiles
from circuitloc.errors import DatasetError
from circuitloc.report.tables.localization import table1, table2
from circuitloc.tasks import facts
from circuitloc.tasks.common import curve_rows, mark_scoring
from circuitloc.tasks.registry import floor_value, task_of


def _job(card, task="ioi", **fields) -> JobSettings:
    return JobSettings(card=card, batch_tokens=4096, task=task, min_group=2, seed=0, **fields)


# -- the facts metric -----------------------------------------------------------------------

def test_margin_matches_a_hand_computation():
    logits = torch.tensor([[2.0, 5.0, 1.0, 4.5],    # answer 1 is top: 5.0 - 4.5
                           [3.0, 1.0, 3.5, -2.0],   # answer 0 is second: 3.0 - 3.5
                           [0.0, 0.0, 0.0, 0.0]])   # a tie with every rival: 0
    batch = {"answer_id": torch.tensor([1, 0, 3])}
    got = facts.margin(logits, batch)
    assert torch.allclose(got, torch.tensor([0.5, -0.5, 0.0]))
    # shift-invariant (one constant added to a row's logits), and its sign is top-1 correctness
    assert torch.allclose(facts.margin(logits + torch.tensor([[7.0], [-3.0], [1.0]]), batch), got)
    acc = facts.accuracy(logits[:2], {"answer_id": batch["answer_id"][:2]})
    assert acc.tolist() == [1.0, 0.0] and (got[:2] > 0).float().tolist() == acc.tolist()
    # log-probability by hand: x_a - log sum exp(x)
    lp = facts.logprob(logits, batch)
    hand = [5.0 - np.log(np.exp([2.0, 5.0, 1.0, 4.5]).sum()), 3.0 - np.log(np.exp([3.0, 1.0, 3.5, -2.0]).sum()),
            -np.log(4.0)]
    assert np.allclose(lp.numpy(), hand, atol=1e-6)


def test_facts_task_ranks_on_the_chosen_metric_and_reports_the_others():
    t = task_of("facts")
    assert t.metric_name == "margin" and set(t.extra) == {"accuracy", "logprob"} and t.higher_is_better
    assert task_of("facts_shared", "accuracy").metric_name == "accuracy"
    assert set(task_of("facts", "accuracy").extra) == {"margin", "logprob"}
    assert task_of("ioi").metric_name == "ld" and task_of("ioi", "ld").metric_name == "ld"
    with pytest.raises(ValueError, match="tasks.facts.metric"):
        task_of("facts", "top5")
    with pytest.raises(ValueError):
        task_of("ioi", "margin")
    # floors: 0 where the task-gone value is 0 (margin: where top-1 flips); a uniform guess for logprob
    assert floor_value(task_of("facts")) == 0.0 and floor_value(task_of("facts", "accuracy")) == 0.0
    assert floor_value(task_of("facts", "logprob"), 100) == pytest.approx(-np.log(100))


def test_schema_defaults_are_margin_and_heldout():
    from snakemake.utils import validate

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    assert schema["properties"]["tasks"]["properties"]["facts"]["properties"]["metric"]["default"] == "margin"
    assert schema["properties"]["curves"]["properties"]["prompts"]["default"] == "heldout"
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    del cfg["tasks"]["facts"]["metric"], cfg["curves"]["prompts"]
    validate(cfg, str(ROOT / "config" / "schema.yaml"))  # fills in the defaults
    assert cfg["tasks"]["facts"]["metric"] == "margin" and cfg["curves"]["prompts"] == "heldout"
    cfg["curves"]["prompts"] = "some"
    with pytest.raises(Exception, match="some"):
        validate(cfg, str(ROOT / "config" / "schema.yaml"))


# -- held-out rows --------------------------------------------------------------------------

@pytest.mark.parametrize("n,n_score,n_curve", [(200, 50, 200), (40, 10, None), (165, 100, 200), (30, 10, 5)])
def test_heldout_curve_rows_never_overlap_the_scoring_rows(n, n_score, n_curve):
    df = mark_scoring(pl.DataFrame({"x": np.random.default_rng(0).permutation(n)}), n_score)
    score = df["score"].to_numpy()
    rows = curve_rows(score, n_curve, "heldout")
    assert not score[rows].any()  # disjoint from the scoring set
    assert len(rows) == min(n - n_score, n_curve or n) and len(set(rows.tolist())) == len(rows)
    assert (np.diff(rows) > 0).all()  # the first held-out rows, in dataset order
    everything = curve_rows(score, n_curve, "all")  # the paper's protocol: the first n_curve rows
    assert everything.tolist() == list(range(min(n, n_curve or n)))


def test_no_heldout_row_is_a_clear_error():
    score = mark_scoring(pl.DataFrame({"x": range(20)}), 20)["score"].to_numpy()
    with pytest.raises(DatasetError, match="no held-out prompts.*curves.prompts: all"):
        curve_rows(score, 10, "heldout", "curves facts/m")
    assert len(curve_rows(score, 10, "all")) == 10
    with pytest.raises(ValueError, match="curves.prompts"):
        curve_rows(score, 10, "both")


@pytest.fixture(scope="module")
def ioi_job(tmp_path_factory, tiny_dirs):
    """The tiny Qwen2 model and an IOI-shaped set of 24 random prompts, the first 8 for scoring."""
    root = tmp_path_factory.mktemp("heldout")
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    io.write_parquet(mark_scoring(ioi_shaped(24, 3, seed=1), 8), root / "ioi.parquet")
    return card, root / "ioi.parquet"


def _record_job_rows(monkeypatch) -> list:
    """The dataset rows of every AblationJob the pipeline builds, in order."""
    seen = []

    class Spy(pipeline.AblationJob):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen.append(self.rows_in_full.copy())

    monkeypatch.setattr(pipeline, "AblationJob", Spy)
    return seen


def test_curve_job_runs_only_heldout_prompts_and_table1_reports_both_scores(ioi_job, tmp_path, monkeypatch):
    card, data = ioi_job
    seen = _record_job_rows(monkeypatch)
    scores, curve, ctrl = tmp_path / "s.parquet", tmp_path / "c.parquet", tmp_path / "c.control.parquet"
    pipeline.score(_job(card), data, "zero-query", ScoreFiles(scores, tmp_path / "s.prompts.parquet"))
    cfg = {"n_curve": 100, "max_steps": 3, "methods": ["ranked"], "control_draws": 2, "prompts": "heldout"}
    pipeline.curve(_job(card, curves=CurveSettings.of(cfg)), data, "zero-query", CurveFiles(scores, curve, ctrl))
    scoring = np.flatnonzero(io.read_parquet(data)["score"].to_numpy())
    assert seen[0].tolist() == scoring.tolist()
    assert not set(seen[1].tolist()) & set(scoring.tolist()) and len(seen[1]) == 24 - 8
    s, c = io.read_parquet(scores), io.read_parquet(curve)
    assert c["prompts"][0] == "heldout" and c["n_prompts"][0] == 16
    t1 = table1("ioi", {"tinyq": card}, {"tinyq": s}, {"tinyq": c}, 0.8)
    row = t1.row(0, named=True)
    assert (row["curve_prompts"], row["n_curve_prompts"], row["n_score_prompts"]) == ("heldout", 16, 8)
    first = c.filter((pl.col("method") == "ranked") & (pl.col("step") == 1)).row(0, named=True)
    assert first["unit"] == s.sort("drop", descending=True)["unit"][0]
    assert row["top_head_score_heldout"] == pytest.approx(first["clean"] - first["ld"])
    if first["clean"] > 0:  # the conditioning rule: a percentage only above the floor (an untrained toy's LD may be < 0)
        assert row["damage_ok"] and row["top_head_pct_heldout"] == pytest.approx(100 * first["damage"])
    else:
        assert not row["damage_ok"] and np.isnan(row["top_head_pct_heldout"]) and "clean ≈ floor" in row["damage_note"]
    t2 = table2("ioi", {"tinyq": card}, {"tinyq": c}, {"tinyq": io.read_parquet(ctrl)})
    assert t2["curve_prompts"][0] == "heldout" and t2["n_curve_prompts"][0] == 16
    # all: the first n_curve rows, the scoring rows among them
    seen.clear()
    pipeline.curve(_job(card, curves=CurveSettings.of({**cfg, "prompts": "all", "n_curve": 12})), data, "zero-query", CurveFiles(scores, curve, ctrl))
    assert seen[0].tolist() == list(range(12)) and io.read_parquet(curve)["prompts"][0] == "all"


def test_a_curve_without_sufficiency_has_the_same_curves_and_control_and_no_cpr(ioi_job, tmp_path):
    """curves.sufficiency false leaves out MIB's sufficiency rows only: the ranked and greedy rows and
    the random control are those of the default run, and Table 1's cpr and cmd are empty."""
    card, data = ioi_job
    scores = tmp_path / "s.parquet"
    pipeline.score(_job(card), data, "zero-query", ScoreFiles(scores, tmp_path / "s.prompts.parquet"))
    cfg = {"n_curve": 100, "max_steps": 3, "methods": ["ranked", "greedy"], "greedy_candidates": 3,
           "greedy_steps": 2, "control_draws": 2, "prompts": "heldout"}
    got = {}
    for on in (True, False):
        files = CurveFiles(scores, tmp_path / f"c{on}.parquet", tmp_path / f"c{on}.control.parquet")
        pipeline.curve(_job(card, curves=CurveSettings.of({**cfg, "sufficiency": on})), data, "zero-query", files)
        got[on] = io.read_parquet(files.curve), io.read_parquet(files.control)
    (full, full_ctrl), (bare, bare_ctrl) = got[True], got[False]
    assert sorted(set(full["method"])) == ["greedy", "ranked", "sufficiency"]
    assert sorted(set(bare["method"])) == ["greedy", "ranked"]
    kept = full.filter(pl.col("method") != "sufficiency").select(bare.columns)
    assert kept.equals(bare) and full_ctrl.equals(bare_ctrl)
    rows = {on: table1("ioi", {"tinyq": card}, {"tinyq": io.read_parquet(scores)}, {"tinyq": c}, 0.8).row(0, named=True)
            for on, (c, _) in got.items()}
    assert np.isnan(rows[False]["cpr"]) and np.isnan(rows[False]["cmd"])
    same = pl.DataFrame([{k: v for k, v in r.items() if k not in ("cpr", "cmd")} for r in rows.values()])
    assert all(same[c].n_unique() == 1 for c in same.columns)  # every other column unchanged


def _facts_rows(n, n_score, vocab):
    """A facts-shaped dataset for the tiny model: random prompts, answers among its tokens."""
    rng = np.random.default_rng(0)
    df = pl.DataFrame({"input_ids": [rng.integers(3, vocab, 5).tolist() for _ in range(n)],
                       "answer_id": rng.integers(3, vocab, n).tolist(),
                       "domain": ["d"] * n, "relation": ["r"] * n},
                      schema={"input_ids": pl.List(pl.Int64), "answer_id": pl.Int64, "domain": pl.String,
                              "relation": pl.String})
    return mark_scoring(df, n_score)


def test_facts_scores_and_curves_use_the_chosen_metric_and_keep_accuracy(tiny_dirs, tmp_path):
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    data = tmp_path / "facts.parquet"
    io.write_parquet(_facts_rows(14, 6, 20), data)
    scores, curve, ctrl = tmp_path / "s.parquet", tmp_path / "c.parquet", tmp_path / "c.control.parquet"
    pipeline.score(_job(card, "facts"), data, "zero-query", ScoreFiles(scores, tmp_path / "s.prompts.parquet"))
    cfg = {"n_curve": 100, "max_steps": 3, "methods": ["ranked"], "control_draws": 2, "prompts": "heldout"}
    pipeline.curve(_job(card, "facts", curves=CurveSettings.of(cfg)), data, "zero-query", CurveFiles(scores, curve, ctrl))
    s, c = io.read_parquet(scores), io.read_parquet(curve)
    assert s["metric"][0] == "margin" and {"margin_clean", "accuracy_clean", "logprob_clean"} <= set(s.columns)
    assert (s["floor"] == 0).all() and c["floor"][0] == 0 and c["prompts"][0] == "heldout"
    assert {"accuracy", "accuracy_clean", "margin"} <= set(c.columns) and c["n_prompts"][0] == 8
    t1 = table1("facts", {"tinyq": card}, {"tinyq": s}, {"tinyq": c}, 0.8)
    cols = t1.columns
    assert cols.index("baseline_margin") < cols.index("baseline_accuracy")  # the first baseline: the ranked one
    assert 0 <= t1["baseline_accuracy"][0] <= 1 and "top_head_score_heldout" in cols
    # accuracy as the ranking metric: the same job on the old metric
    pipeline.score(_job(card, "facts", metric="accuracy"), data, "zero-query", ScoreFiles(scores, tmp_path / "s.prompts.parquet"))
    s = io.read_parquet(scores)
    assert s["metric"][0] == "accuracy" and "margin_clean" in s.columns
    assert set(np.round(s["accuracy_ablated"].to_numpy() * 6, 6)) <= set(range(7))  # steps of 1/n


@pytest.mark.parametrize("name", ["config/config.yaml", ".test/config.yaml", "config/sweep.yaml",
                                  "config/sweep_large.yaml", "config/paper.yaml"])
def test_configs_leave_heldout_rows_where_curves_use_them(name):
    """Under curves.prompts: heldout (the default) every fixed-size task keeps rows beyond its
    n_score, for every model's overrides (facts sets are filtered per model: checked when built)."""
    cfg = yaml.safe_load((ROOT / name).read_text())
    prompts = cfg["curves"].get("prompts", "heldout")
    models = cfg.get("models") or {}
    for model, spec in list(models.items()) + [(None, {})]:
        if spec.get("curves", {}).get("prompts", prompts) != "heldout":
            continue
        for task in ("ioi", "induction"):
            t = {**cfg["tasks"][task], **spec.get("tasks", {}).get(task, {})}
            assert t["n"] > t["n_score"], (name, model, task)
    if name == "config/paper.yaml":  # the paper's protocol: induction is scored on all of its rows
        assert prompts == "all" and cfg["tasks"]["facts"]["metric"] == "accuracy"


def test_greedy_curve_job_chooses_on_scoring_rows_and_reports_on_held_out_rows(ioi_job, tmp_path, monkeypatch):
    """The curve job's greedy search runs its trials on the scoring rows (a second job over them)
    and reports on the held-out rows; the two row sets are disjoint."""
    card, data = ioi_job
    seen = _record_job_rows(monkeypatch)
    scores, curve, ctrl = tmp_path / "s.parquet", tmp_path / "c.parquet", tmp_path / "c.control.parquet"
    pipeline.score(_job(card), data, "zero-query", ScoreFiles(scores, tmp_path / "s.prompts.parquet"))
    cfg = {"n_curve": 100, "max_steps": 3, "methods": ["ranked", "greedy"], "greedy_candidates": 2,
           "greedy_steps": 4, "control_draws": 2, "prompts": "heldout"}
    pipeline.curve(_job(card, curves=CurveSettings.of(cfg)), data, "zero-query", CurveFiles(scores, curve, ctrl))
    scoring = np.flatnonzero(io.read_parquet(data)["score"].to_numpy()).tolist()
    assert len(seen) == 3, "a score job, the curve job and the greedy selection job"
    assert seen[2].tolist() == scoring and not set(seen[1].tolist()) & set(scoring)
    c = io.read_parquet(curve)
    assert c["select_prompts"][0] == "scoring" and c["prompts"][0] == "heldout"
    assert len(c.filter(pl.col("method") == "greedy")) == 4  # greedy_steps, past the pool of 2
