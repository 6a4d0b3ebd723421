"""A job's settings are one typed record built once from its rule's params (`JobSettings.from_params`),
and every stage reads that record: the rule's param names meet the engine in one place."""

from dataclasses import FrozenInstanceError

import pytest

from helpers import model_card

from circuitloc.engine.settings import CurveFiles, CurveSettings, JobSettings, ScoreFiles
from circuitloc.stats import Bootstrap

CARD = model_card()
SCORE_PARAMS = {"ablations": ["zero-query", "mean-kv"], "opts": {"min_group": 4, "seed": 3}, "metric": "accuracy",
                "bootstrap": {"n": 50, "ci": 0.9, "seed": 3}, "batch_tokens": 2048, "device": "cpu", "code": "h",
                "resume": "results/.resume"}


def test_a_score_rules_params_become_one_record():
    job = JobSettings.from_params(SCORE_PARAMS, CARD, task="facts")
    assert (job.task, job.metric, job.min_group, job.seed, job.batch_tokens) == ("facts", "accuracy", 4, 3, 2048)
    assert job.bootstrap == Bootstrap(50, 3, 0.9) and job.curves is None
    with pytest.raises(FrozenInstanceError):
        job.seed = 1


def test_a_curve_rule_gives_its_curve_config_and_one_seed():
    cfg = {"prompts": "heldout", "max_steps": 3, "methods": ["ranked"], "control_draws": 2, "threshold": 0.8,
           "n_curve": None}
    job = JobSettings.from_params({**SCORE_PARAMS, "seed": 3, "cfg": cfg}, CARD, task="ioi", curves=cfg)
    assert job.curves == CurveSettings(methods=("ranked",), max_steps=3, control_draws=2, prompts="heldout")
    assert job.seed == 3
    with pytest.raises(FrozenInstanceError):
        job.curves.max_steps = 1
    with pytest.raises(ValueError, match="curve config lacks greedy_candidates, greedy_steps"):
        CurveSettings.of({**cfg, "methods": ["ranked", "greedy"]})
    with pytest.raises(ValueError, match=r"two seeds \[0, 3\]"):
        JobSettings.from_params({**SCORE_PARAMS, "seed": 0}, CARD, task="ioi")


def test_a_dataset_rules_cfg_is_not_a_curve_config():
    job = JobSettings.from_params({"cfg": {"n": 10}, "seed": 5, "batch_tokens": 64, "device": "cpu"}, CARD, task="ioi")
    assert job.curves is None and job.seed == 5 and job.min_group is None and job.bootstrap is None


def test_a_specificity_job_moves_from_task_to_task_with_each_ones_metric():
    job = JobSettings.from_params({"opts": {"min_group": 2, "seed": 0}, "metrics": {"facts": "logprob", "ioi": None},
                                   "batch_tokens": 64, "device": "cpu"}, CARD)
    assert job.task is None
    assert (job.for_task("facts").task, job.for_task("facts").metric) == ("facts", "logprob")
    assert job.for_task("neutral").metric is None and job.for_task("facts").min_group == 2


def test_an_ablations_files_name_their_outputs():
    assert ScoreFiles("s", "p").outputs() == ["s", "p"]
    assert CurveFiles("s", "c", "k").outputs() == ["c", "k"]  # the scores table is the curve's input
