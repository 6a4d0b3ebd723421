"""The Python API (docs/api.md) on a tiny Hugging Face model: `import circuitloc` stays light, a
local directory loads as a model, and your own prompts score units the way a hand computation
does (the zero ablation of one query head, done with a forward hook on the plain model)."""

import math
import os
import subprocess
import sys

import polars as pl
import pytest
import torch

import circuitloc as cl
from circuitloc.api.ablate import NO_SPREAD, ONE_PROMPT
from circuitloc.errors import ConfigError

TEXTS = ["when Mary and John went to the store , John gave a drink to",
         "when Tom and Anna went to the garden , Anna gave a book to",
         "then Paul and Kate went to the store , Kate gave a drink to",
         "when Lisa and Tom went to the garden , Tom gave a book to"]
ANSWERS, WRONG = ["Mary", "Tom", "Paul", "Lisa"], ["John", "Anna", "Kate", "Tom"]


def test_import_circuitloc_loads_no_torch_until_the_api_is_used():
    code = ("import sys, circuitloc\nassert 'torch' not in sys.modules and 'polars' not in sys.modules\n"
            "assert circuitloc.Run.__name__ == 'Run' and 'torch' in sys.modules\n"
            "try:\n    circuitloc.nope\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit('no error')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]


def _last_logits(hf, data, head=None):
    """The last position's logits, with `head` = (layer, h) zeroed (h: a head or a list of heads) at
    the input of the attention's output projection (its z), by a hook on the plain model."""
    ids = torch.tensor(data.rows["input_ids"].to_list())
    hooks = []
    if head is not None:
        layer, h = head
        attn = hf.model.layers[layer].self_attn
        d = attn.head_dim

        def zero(_module, args):
            z = args[0].clone()
            for one in h if isinstance(h, list) else [h]:
                z[..., one * d:(one + 1) * d] = 0
            return (z,)
        hooks.append(attn.o_proj.register_forward_pre_hook(zero))
    with torch.no_grad():
        logits = hf(ids).logits[:, -1]
    for hook in hooks:
        hook.remove()
    return logits


def _ld(hf, data, head=None):
    """Mean logit(answer) - logit(wrong) at the last position (`_last_logits`)."""
    logits = _last_logits(hf, data, head)
    ids = torch.tensor(data.rows["input_ids"].to_list())
    rows = torch.arange(len(ids))
    io, s = torch.tensor(data.rows["io_id"].to_list()), torch.tensor(data.rows["s_id"].to_list())
    return float((logits[rows, io] - logits[rows, s]).mean())


def test_own_prompts_on_a_local_model_score_as_a_hand_computation(tiny_dirs, tmp_path):
    run = cl.Run(workdir=tmp_path, bootstrap={"n": 20})
    model = run.model(str(tiny_dirs["qwen_gqa"]), name="tiny_qwen")
    assert model.card.source == "hf" and model.card.name == "tiny_qwen"
    data = cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)
    assert data.rows["score"].to_list() == [True] * 4 and len(set(map(len, data.rows["input_ids"]))) == 1
    assert run.self_check(model, data)  # the engine against a plain forward: measured differences
    scores = run.scores(model, data, "zero-query")
    assert len(scores) == model.card.n_layers * model.card.n_heads
    hf = model.loaded()[0]
    clean = _ld(hf, data)
    for row in scores.head(3).iter_rows(named=True):
        ablated = _ld(hf, data, (row["layer"], row["head"]))
        assert row["drop"] == pytest.approx(clean - ablated, rel=1e-4, abs=1e-5)
    with pytest.raises(ValueError, match="answer 'Mary John' is 2 tokens"):
        cl.own_prompts(model, TEXTS[:1], ["Mary John"], ["John"])


@pytest.fixture(scope="module")
def tiny_api_model(tiny_dirs, tmp_path_factory):
    run = cl.Run(workdir=tmp_path_factory.mktemp("api"), bootstrap={"n": 20})
    return run, run.model(str(tiny_dirs["qwen_gqa"]), name="tiny_qwen")


@pytest.mark.parametrize("answer, message", [
    ("Zork", "answer 'Zork' is not in this tokenizer's vocabulary (it maps to the unknown token '<unk>'): "
             "give a token it knows (or its id)"),
    (-1, "answer id -1 is outside this model's vocabulary (ids 0 to {last})"),
    (10**6, "answer id 1000000 is outside this model's vocabulary (ids 0 to {last})"),
    (True, "answer True: give one token as text (a str) or its id (an int)"),
])
def test_own_prompts_refuse_an_unknown_token_answer_or_an_id_outside_the_vocabulary(tiny_api_model, answer, message):
    """An answer the tokenizer maps to its unknown token would score <unk> for every word it lacks;
    id -1 would index the last logit: each is one line, not a row."""
    _run, model = tiny_api_model
    last = model.loaded()[0].get_output_embeddings().weight.shape[0] - 1
    with pytest.raises(ValueError) as e:
        cl.own_prompts(model, TEXTS[:1], [answer], ["John"])
    assert str(e.value) == message.format(last=last)
    with pytest.raises(ValueError, match="^wrong answer id -1 is outside"):
        cl.own_prompts(model, TEXTS[:1], ["Mary"], [-1])
    # an id inside the vocabulary, and the unknown token's own id, given as an id, stay allowed
    tok = model.loaded()[1]
    data = cl.own_prompts(model, TEXTS[:1], [last], [tok.unk_token_id])
    assert data.rows["io_id"].to_list() == [last] and data.rows["s_id"].to_list() == [tok.unk_token_id]


@pytest.mark.parametrize("settings, message", [
    ({"n_scroe": 4}, "Run.prompts: tasks.ioi: unknown key 'n_scroe' (did you mean 'n_score'?)"),
    ({"n": "many"}, "Run.prompts: tasks.ioi.n = 'many': expected an integer"),
    ({"source": {"kind": "fahamu", "pth": "x.parquet"}},
     "Run.prompts: tasks.ioi.source: unknown key 'pth' (did you mean 'path'?)"),
])
def test_prompts_settings_are_checked_as_the_configs_task_block(tiny_api_model, settings, message):
    run, model = tiny_api_model
    with pytest.raises(ConfigError) as e:
        run.prompts(model, "ioi", **settings)
    assert str(e.value) == message
    with pytest.raises(ConfigError, match=r"^Run.prompts: tasks.facts.metric: not a setting of the prompts"):
        run.prompts(model, "facts", metric="accuracy")


@pytest.mark.parametrize("block, message", [
    ({"source": "hf"}, "load_model: models.m: missing the required key 'hf'"),
    ({"hf": "gpt2"}, "load_model: models.m: missing the required key 'source'"),
    ({"source": "hf", "hf": "gpt2", "dtpye": "float32"}, "load_model: models.m: unknown key 'dtpye' (did you mean 'dtype'?)"),
    ({"source": "hub", "hf": "gpt2"}, "load_model: models.m.source = 'hub': expected one of toy, gguf, hf"),
])
def test_a_model_block_without_its_source_is_named_not_a_key_error(tmp_path, block, message):
    with pytest.raises(ConfigError) as e:
        cl.load_model(block, name="m", workdir=tmp_path)
    assert str(e.value) == message
    assert not list(tmp_path.iterdir())  # refused before anything was built


def _gap(logits, fields):
    """Your own metric: the answer's probability minus the wrong answer's."""
    p = logits.softmax(-1)
    i = torch.arange(len(p))
    return p[i, fields["io_id"]] - p[i, fields["s_id"]]


def test_a_chosen_set_with_an_own_metric_is_a_hand_computation(tiny_api_model):
    """Two heads of one layer ablated together, measured with a probability gap: the engine against
    a hook on the plain model that zeroes both heads' z."""
    run, model = tiny_api_model
    data = cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)
    hf = model.loaded()[0]
    got = run.ablate(model, data, ["L1H0", "L1H1"], metric=_gap)
    pp = run.per_prompt(model, data, ["L1H0", "L1H1"], metric=cl.Metric(_gap, name="gap"))
    fields = {k: torch.tensor(data.rows[k].to_list()) for k in ("io_id", "s_id")}
    clean = _gap(_last_logits(hf, data), fields)
    ablated = _gap(_last_logits(hf, data, (1, [0, 1])), fields)
    assert got["metric"][0] == "_gap" and pp["set"].unique().to_list() == ["L1H0+L1H1"]
    assert got["clean"][0] == pytest.approx(float(clean.mean()), rel=1e-4, abs=1e-6)
    assert got["drop"][0] == pytest.approx(float((clean - ablated).mean()), rel=1e-4, abs=1e-6)
    assert pp["drop"].to_list() == pytest.approx((clean - ablated).tolist(), rel=1e-4, abs=1e-6)
    assert got["damage"][0] == pytest.approx(got["drop"][0] / got["clean"][0])  # floor 0


def test_one_prompt_has_no_interval_and_says_so(tiny_api_model):
    """A bootstrap of one prompt gives a zero-width interval: NaN and a note instead, in the scores
    and in an ablation; identical prompts give an interval of one value, and a note saying why."""
    run, model = tiny_api_model
    one = cl.own_prompts(model, TEXTS[:1], ANSWERS[:1], WRONG[:1], n_score=1)
    scores = run.scores(model, one)
    assert scores["drop"].is_finite().all() and scores["drop_lo"].is_nan().all() and scores["damage_hi"].is_nan().all()
    assert scores["interval_note"].unique().to_list() == [ONE_PROMPT]
    top = scores["unit"][0]
    got = run.ablate(model, one, top)
    assert got["drop"][0] == pytest.approx(scores["drop"][0], rel=1e-5)
    assert math.isnan(got["drop_lo"][0]) and got["interval_note"][0] == ONE_PROMPT
    same = cl.own_prompts(model, TEXTS[:1] * 3, ANSWERS[:1] * 3, WRONG[:1] * 3, n_score=3)
    flat = run.ablate(model, same, top)
    assert flat["interval_note"][0] == NO_SPREAD and flat["drop_lo"][0] == flat["drop_hi"][0]
    four = run.ablate(model, cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4), top)
    assert four["interval_note"][0] == "" and four["drop_lo"][0] < four["drop_hi"][0]
    assert "interval_note" not in run.scores(model, cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)).columns


def test_ablate_names_an_unknown_unit_prompts_or_metric(tiny_api_model):
    run, model = tiny_api_model
    data = cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)
    last = f"L{model.card.n_layers - 1}H{model.card.n_heads - 1}"
    with pytest.raises(ValueError) as e:
        run.ablate(model, data, ["L0H0", "L9H0"])
    assert str(e.value) == f"unknown unit 'L9H0' for this ablation: expected one of L0H0 to {last}"
    with pytest.raises(ValueError, match="^unknown unit 'L0H0' for this ablation: expected one of L0G0 to "):
        run.ablate(model, data, "L0H0", "zero-kv")
    with pytest.raises(ValueError, match=r"^prompts='held': expected one of scoring, heldout, all$"):
        run.ablate(model, data, "L0H0", prompts="held")
    with pytest.raises(ValueError, match=r"^prompts='heldout': none of the 4 prompts is a heldout prompt$"):
        run.per_prompt(model, data, "L0H0", prompts="heldout")
    with pytest.raises(TypeError, match="^metric: expected a function"):
        run.ablate(model, data, "L0H0", metric="ld")


def test_a_kv_group_is_its_row_of_the_kv_scores(tiny_api_model):
    run, model = tiny_api_model
    data = cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)
    want = run.scores(model, data, "zero-kv").filter(pl.col("unit") == "L1G0")
    got = run.ablate(model, data, "L1G0", "zero-kv")
    for col in ("drop", "drop_lo", "drop_hi", "damage", "damage_lo", "damage_hi"):
        assert got[col][0] == pytest.approx(want[col][0], rel=1e-5), col
