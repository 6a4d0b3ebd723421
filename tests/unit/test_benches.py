"""The benches' own arithmetic: the FLOP counts printed beside this machine's matmul rate
(bench/scan.py, bench/toy_step.py) agree with torch's own FLOP counter on small random models, and
bench/run.py's busy-core profile reads Snakemake's log right."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import scan as bench_scan  # noqa: E402


def _linear_flops(fn) -> int:
    """FLOPs of the matrix products (mm, addmm, bmm) torch's counter sees while fn runs."""
    with FlopCounterMode(display=False) as fc:
        fn()
    ops = fc.get_flop_counts()["Global"]
    return sum(v for k, v in ops.items() if str(k).split(".")[-1] in ("mm", "addmm", "bmm"))


def test_scan_forward_flops_counts_every_linear_weight():
    """bench/scan.py's forward-pass equivalent, less its attention term, is exactly the Linear
    products of the base model's forward over the same (prompts x width) ids; no unembedding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=96, vocab_size=200, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).eval()
    n, width = 5, 7
    ids = torch.randint(0, 200, (n, width))
    with torch.no_grad():
        counted = _linear_flops(lambda: model.model(input_ids=ids))
    total = bench_scan.forward_flops(model.model.layers, cfg, n, width)
    attention = n * width * cfg.num_hidden_layers * 2 * 2 * cfg.num_attention_heads * 16 * (width + 1) / 2
    assert total - attention == counted


def test_toy_step_flops_match_a_counted_training_step():
    """bench/toy_step.py's matmul FLOPs of a step (forward + backward), less its attention term, equal
    the matrix products torch counts in one forward and backward of a toy built from the same recipe."""
    import toy_step

    from circuitloc.models import toy

    s = toy.resolve_spec({"n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_mlp": 48})

    class Tok:
        bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    vocab, n, width = 50, 3, 9
    model = toy.build_model(s, vocab, Tok())
    ids = torch.randint(3, vocab, (n, width))

    def step():
        logits = model(input_ids=ids).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids.reshape(-1)).backward()

    counted = _linear_flops(step)
    attention = 3.0 * n * width * s["n_layers"] * 2 * 2 * s["n_heads"] * (32 // 4) * width
    assert toy_step.step_matmul_flops(s, vocab, n * width, width) - attention == counted


LOG = """Select jobs to execute...
[Tue Dec  1 16:00:00 2026]
rule model:
    output: results/models/a/card.json
    jobid: 3
    wildcards: model=a
    priority: 50
[Tue Dec  1 16:00:00 2026]
rule model:
    output: results/models/b/card.json
    jobid: 4
    wildcards: model=b
[Tue Dec  1 16:00:30 2026]
Finished jobid: 4 (Rule: model)
1 of 4 steps (25%) done
[Tue Dec  1 16:00:30 2026]
rule scores_3:
    jobid: 7
    wildcards: task=ioi, model=b
[Tue Dec  1 16:01:00 2026]
Finished jobid: 3 (Rule: model)
[Tue Dec  1 16:02:00 2026]
Finished jobid: 7 (Rule: scores_3)
[Tue Dec  1 16:02:00 2026]
localrule all:
    jobid: 0
[Tue Dec  1 16:02:00 2026]
Finished jobid: 0 (Rule: all)
"""


def test_busy_profile_from_a_snakemake_log():
    """Two cores: both busy 0-60 s, one 60-120 s (scores_3 alone): mean 1.5, all busy half the time,
    a 60 s tail running scores_3; per-minute bins 2.0 and 1.0."""
    import run as bench_run

    jobs = bench_run.job_intervals(LOG)
    assert [(j["rule"], j["wildcards"], j["start"], j["end"]) for j in jobs] == [
        ("model", "model=b", 0, 30), ("model", "model=a", 0, 60), ("scores_3", "task=ioi, model=b", 30, 120)]
    prof = bench_run.busy_profile(jobs, cores=2)
    assert prof["bins"] == [2.0, 1.0]
    assert prof["mean_busy"] == 1.5 and prof["all_busy_share"] == 0.5
    assert prof["tail_s"] == 60 and prof["tail_jobs"] == ["scores_3 task=ioi, model=b"]
    one = bench_run.busy_profile(jobs, cores=1)  # one core: never idle
    assert one["all_busy_share"] == 1.0 and one["tail_s"] == 0


def _dtype_run(root: Path, drops: dict, seconds: float, n_prompts: int = 20) -> Path:
    """A results directory as bench/dtype.py reads it: one scores table, one benchmark file."""
    import polars as pl

    units = list(drops)
    (root / "scores" / "ioi" / "m").mkdir(parents=True)
    pl.DataFrame({"unit": units, "drop": [drops[u] for u in units], "damage": [drops[u] / 4.0 for u in units],
                  "ld_clean": [4.0] * len(units), "metric": ["ld"] * len(units),
                  "n_prompts": [n_prompts] * len(units)}).write_parquet(root / "scores" / "ioi" / "m" / "zero-query.parquet")
    (root / "benchmarks" / "scores" / "ioi").mkdir(parents=True)
    (root / "benchmarks" / "scores" / "ioi" / "m.tsv").write_text(
        f"s\th:m:s\tmax_rss\tcpu_time\n{seconds}\t0:00:01\t1\t{seconds / 2}\n")
    return root


def test_dtype_bench_compares_rank_and_time(tmp_path):
    """bench/dtype.py: Spearman equals numpy's correlation of the drops' ranks, the top-5 overlap and
    the largest damage difference are counted from the two tables, the speed ratio from the
    benchmark files; a unit missing from one run leaves the correlation to the common units."""
    import numpy as np

    import dtype as bench_dtype

    rng = np.random.default_rng(0)
    a = {f"L0H{i}": float(v) for i, v in enumerate(rng.normal(size=12))}
    b = {u: v + float(rng.normal(scale=0.5)) for u, v in a.items()}
    b["L0H99"] = 100.0  # only in the second run: its top unit, outside the join
    fa, fb = _dtype_run(tmp_path / "a", a, 30.0), _dtype_run(tmp_path / "b", b, 12.0)
    s = bench_dtype.scores(fa, fb).row(0, named=True)
    common = list(a)
    ra = np.argsort(np.argsort([a[u] for u in common]))
    rb = np.argsort(np.argsort([b[u] for u in common]))
    assert abs(s["spearman"] - np.corrcoef(ra, rb)[0, 1]) < 1e-12
    top = lambda d, k: set(sorted(d, key=d.get, reverse=True)[:k])  # noqa: E731
    assert s["top5"] == len(top(a, 5) & top(b, 5))
    assert s["top_float32"] == max(a, key=a.get) and s["top_bfloat16"] == "L0H99"
    assert abs(s["max_damage_diff"] - max(abs(a[u] - b[u]) / 4.0 for u in common)) < 1e-12
    j = bench_dtype.jobs(fa, fb).row(0, named=True)
    assert j["job"] == "scores/ioi/m" and j["x_faster"] == 2.5 and j["cpu_bfloat16"] == 6.0


def test_stacked_toys_train_the_same_weights_as_alone():
    """bench/toy_stack.py on the pinned path: toys trained in groups of 2 and 3 and in reverse order
    have the weights they have alone, bit for bit, and the bench prints toys per minute per group."""
    import subprocess

    out = subprocess.run([sys.executable, str(ROOT / "bench" / "toy_stack.py"), "--groups", "1,2,3", "--steps", "3",
                          "--rounds", "1", "--batch", "4", "--width", "13", "--vocab", "60", "--d-mlp", "32"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.split() and line.split()[0] in ("1", "2", "3", "reversed")]
    assert [r.split()[0] for r in rows] == ["1", "2", "3", "reversed"], out
    assert [r.rsplit("equal (", 1)[-1] for r in rows] == ["1 toys)", "2 toys)", "3 toys)", "3 toys)"], out
    assert all(float(r.split()[-4]) > 0 for r in rows[:3]), out  # toys per minute


@pytest.mark.slow  # trains a toy: 15 s
def test_toy_steps_reports_each_checked_step():
    """bench/toy_steps.py: a toy's held-out checks at every checked step and the last, counted per step."""
    import subprocess

    out = subprocess.run([sys.executable, str(ROOT / "bench" / "toy_steps.py"), "--models", "sweep_dh32_kv1_s0",
                          "--steps", "4", "--every", "2"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "sweep_dh32_kv1_s0" in out and "first passes at step -" in out, out  # 4 steps pass nothing
    assert [line.split()[0] for line in out.splitlines() if line.strip().endswith("of 1")] == ["2", "4"], out


def test_toy_steps_batch_and_lr_reach_the_trained_recipe():
    """bench/toy_steps.py --batch/--lr: the toy trains on that batch (its rows per task) and rate, and the
    output says what its steps and its process cost."""
    import subprocess

    out = subprocess.run([sys.executable, str(ROOT / "bench" / "toy_steps.py"), "--models", "sweep_dh32_kv1_s0",
                          "--steps", "2", "--every", "0", "--batch", "8", "--lr", "0.001"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    line = next(x for x in out.splitlines() if x.startswith("sweep_dh32_kv1_s0"))
    assert "batch 8 {'ioi': 3, 'induction': 3, 'facts': 2} lr 0.001 " in line, out  # mix 24:24:16 of 8 rows
    assert "mean seconds a toy: 2 optimiser steps" in out, out


def test_toy_vml_compare_names_the_first_op_that_differs_on_equal_inputs():
    """bench/toy_vml.py's trace comparison: an op whose inputs differ only because an earlier one's
    outputs did is not the culprit; a float64 difference that rounds alike is counted apart from
    float32 ones; the weights line decides equality."""
    import toy_vml

    native = ["init\ta:float32(2,)\t-", "aten.mm\tb:float32(2,)\t[a]", "aten.sqrt\tc:float64(2,)\t[b]",
              "aten._to_copy\td:float32(2,)\t[c]", "aten.add\te:float32(2,)\t[d]", "weights\tw:float32(2,)\t-"]
    same = toy_vml.compare(native, native)
    assert same == {"ops": 6, "same_length": True, "differing": 0, "differing_float32": 0, "culprit": None,
                    "culprit_line": None, "weights_equal": True}
    rounded_alike = native[:2] + ["aten.sqrt\tC:float64(2,)\t[b]", "aten._to_copy\td:float32(2,)\t[C]"] + native[4:]
    r = toy_vml.compare(native, rounded_alike)
    assert (r["differing"], r["differing_float32"], r["culprit"], r["weights_equal"]) == (1, 0, "aten.sqrt", True)
    apart = native[:2] + ["aten.sqrt\tC:float64(2,)\t[b]", "aten._to_copy\tD:float32(2,)\t[C]",
                          "aten.add\tE:float32(2,)\t[D]", "weights\tW:float32(2,)\t-"]
    r = toy_vml.compare(native, apart)
    assert (r["differing"], r["differing_float32"], r["culprit"], r["culprit_line"], r["weights_equal"]) == \
        (4, 3, "aten.sqrt", 2, False)
