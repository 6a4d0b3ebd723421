"""Config of the guided scan (config `scores:`, a model's `scores:` overrides): exact when absent,
so an exact run's job params are today's; a guided model's score jobs get its settings and the top
units its curves use; bad values stop the plan with one line naming the field."""

import pytest
import yaml
from workflow_helpers import TEST_CONFIG, config_error, resolve_over_test_config

from circuitloc.engine.settings import ScoreSettings
from circuitloc.plan.config import views
from circuitloc.plan.config.checks import min_audit


def with_model_scores(block: dict) -> dict:
    """A layer that gives tiny_gqa (of the test config) this `scores:` block."""
    models = yaml.safe_load(TEST_CONFIG.read_text())["models"]
    models["tiny_gqa"]["scores"] = block
    return {"models": models}


def test_absent_scores_block_is_the_exact_scan_with_todays_params():
    cfg = resolve_over_test_config({})
    assert "scores" not in cfg  # the resolved config gains no block
    for m in views.models(cfg):
        assert views.scores_opts(cfg, m) is None
        assert set(views.ablation_opts(cfg, m)) == {"min_group", "seed"}
    assert ScoreSettings() == ScoreSettings.of(None)
    assert (ScoreSettings().method, ScoreSettings().audit, ScoreSettings().level) == tuple(views.SCORE_DEFAULTS.values())


def test_guided_per_model_and_run_wide():
    cfg = resolve_over_test_config(with_model_scores({"method": "guided", "level": 0.1}))
    opts = views.ablation_opts(cfg, "tiny_gqa")["scores"]
    curves = cfg["curves"]
    want_top = max(curves["max_steps"], curves["greedy_candidates"] + curves["greedy_steps"] - 1, 10)
    assert opts == {"method": "guided", "audit": 30, "level": 0.1, "top": want_top}
    assert ScoreSettings.of(opts).top == want_top
    others = [m for m in views.models(cfg) if m != "tiny_gqa"]
    assert others and all("scores" not in views.ablation_opts(cfg, m) for m in others)
    cfg = resolve_over_test_config({"scores": {"method": "guided", "audit": 40, "top": 12}})
    assert all(views.scores_opts(cfg, m) == {"method": "guided", "audit": 40, "level": 0.05, "top": 12}
               for m in views.models(cfg))
    # a model's scores never change its build
    assert "scores" in views.NOT_BUILT_FROM


@pytest.mark.parametrize("layer, expected", [
    ({"scores": {"method": "guided", "audit": 10}},
     "config: scores.audit = 10 is below 19, the fewest audited units at which scores.level = 0.05 gives a "
     "finite bound (1/level - 1)"),
    (with_model_scores({"method": "guided", "level": 0.01}),
     "config: models.tiny_gqa.scores.audit = 30 is below 99, the fewest audited units at which scores.level = "
     "0.01 gives a finite bound (1/level - 1)"),
    ({"scores": {"method": "fast"}}, "config: scores.method = 'fast': expected one of exact, guided"),
    ({"scores": {"level": 1.5}}, "config: scores.level = 1.5: expected less than 1"),
])
def test_bad_scores_values_stop_the_plan_naming_the_field(layer, expected):
    assert config_error(layer) == expected


def test_min_audit():
    assert [min_audit(a) for a in (0.5, 0.2, 0.1, 0.05, 0.01)] == [1, 4, 9, 19, 99]
