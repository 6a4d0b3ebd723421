"""`max_batch_tokens: auto`: a token budget from the device's free memory (a pure function of the
free bytes), never more than the device holds, logged; a fixed number on a CPU; a number as given."""

import logging

import pytest
from helpers import model_card

from circuitloc.engine.budget import (
    CPU_TOKENS,
    KEPT_STREAMS,
    auto_tokens,
    batch_tokens,
    reserve,
    settled,
    token_bytes,
)
from circuitloc.engine.settings import JobSettings

# Qwen2.5-7B's shape in bfloat16
QWEN = model_card(name="qwen7b", n_layers=28, n_heads=28, n_kv_heads=4, d_model=3584, d_head=128, dtype="bfloat16")
GIB = 2**30


def test_the_budget_follows_the_free_memory_and_fits_in_it():
    per_token = 2 * (28 * 3584 + 24 * 3584 + 28 * 512)  # residual cache, one layer's activations, attention rows
    assert token_bytes(QWEN) == per_token
    for free in (1 * GIB, 20 * GIB, 60 * GIB):
        tokens = auto_tokens(free, QWEN)
        assert tokens == int(0.8 * free // per_token)
        assert tokens * token_bytes(QWEN) <= free  # never above what the device holds
    assert auto_tokens(60 * GIB, QWEN) > auto_tokens(20 * GIB, QWEN) > 40_000
    assert auto_tokens(1000, QWEN) == 1  # one prompt per pass, the least the engine does


def test_auto_on_cuda_is_logged_with_the_chosen_number(caplog):
    with caplog.at_level(logging.INFO, logger="circuitloc"):
        got = batch_tokens("auto", QWEN, "cuda", free_bytes=20 * GIB)
    assert got == auto_tokens(20 * GIB, QWEN)
    assert f"max_batch_tokens auto: {got} tokens (20.0 GiB free on cuda" in caplog.text


def test_auto_on_a_cpu_is_the_fixed_number_and_a_number_is_kept():
    assert batch_tokens("auto", QWEN, "cpu") == CPU_TOKENS == 4096
    assert batch_tokens(2048, QWEN, "cuda", free_bytes=1) == 2048


def test_the_budget_settles_after_what_the_job_keeps(caplog):
    """Re-sized once the job holds its replacement, less the kept streams of resume and a second
    replacement (the greedy selection job's): never above the first sizing, smaller by what is kept."""
    tokens = 500 * 20  # 500 IOI curve prompts padded to 20 tokens
    stream = 2 * 28 * 3584 * tokens  # one kept residual stream: every layer's input, bfloat16
    repl = 28 * tokens * 3584 * 2  # a mean replacement [N, T, H, Dh] per layer, bfloat16
    keeps = reserve(QWEN, tokens, repl)
    assert keeps == KEPT_STREAMS * stream + repl
    first = batch_tokens("auto", QWEN, "cuda", free_bytes=60 * GIB)
    with caplog.at_level(logging.INFO, logger="circuitloc"):
        got = settled(first, "auto", QWEN, "cuda", keeps, free_bytes=50 * GIB)
    assert got == int(0.8 * (50 * GIB - keeps) // token_bytes(QWEN)) < first
    assert got * token_bytes(QWEN) + keeps <= 50 * GIB  # the passes and what is kept fit together
    assert f"max_batch_tokens auto, settled: {got} tokens (50.0 GiB free on cuda" in caplog.text
    assert settled(first, "auto", QWEN, "cuda", 0, free_bytes=80 * GIB) == first  # never above the first
    assert settled(first, "auto", QWEN, "cuda", 10 * GIB, free_bytes=5 * GIB) == 1  # kept more than free
    # a CPU's fixed number and a number in the config are not re-sized
    assert settled(CPU_TOKENS, "auto", QWEN, "cpu", keeps, free_bytes=1) == CPU_TOKENS
    assert settled(2048, 2048, QWEN, "cuda", keeps, free_bytes=1) == 2048


def test_the_kept_streams_counted_follow_the_engine():
    from circuitloc.engine.incremental import KEEP

    assert KEPT_STREAMS == KEEP + 1  # the kept prompt sets' streams and the one a step builds


@pytest.mark.parametrize("value, want", [("auto", "auto"), (4096, 4096), ("512", 512)])
def test_a_job_reads_auto_or_a_number(value, want):
    assert JobSettings.from_params({"batch_tokens": value}, QWEN).batch_tokens == want


def test_the_schema_takes_auto_or_a_positive_number():
    from pathlib import Path

    import jsonschema
    import yaml

    schema = yaml.safe_load((Path(__file__).parents[2] / "config" / "schema.yaml").read_text())
    prop = schema["properties"]["max_batch_tokens"]
    for ok in ("auto", 1, 32768):
        jsonschema.validate(ok, prop)
    for bad in ("lots", 0, 1.5):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, prop)
