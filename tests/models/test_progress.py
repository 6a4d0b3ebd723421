"""A long job's log line says which job, how far, and how long is left at the rate so far; the
job logs carry no third-party loading bars."""

import subprocess
import sys

from workflow_helpers import ROOT, smk_env

from circuitloc.engine.job import progress_line


def test_progress_line_names_the_job_percent_and_time_left():
    line = progress_line("scores ioi/m/zero-query", 81, 176, 46.0)
    assert line.startswith("scores ioi/m/zero-query: 46% (81 of 176 ablation runs), 46 s so far, about ")
    left = 46.0 * (176 - 81) / 81  # the same rate for the rest
    assert f"about {round(left)} s left" in line
    assert progress_line("x", 176, 176, 125.0).endswith("2 min 05 s so far, done")
    assert "time left unknown" in progress_line("x", 0, 10, 3.0)


def test_a_compute_job_loads_weights_without_progress_bars(tmp_path):
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from circuitloc.runner import setup; setup(threads=1)\n"
            "from helpers import tiny_model, word_tokenizer\n"
            "import transformers\n"
            "tok = word_tokenizer(); m = tiny_model('qwen_gqa', len(tok)); m.save_pretrained(sys.argv[3])\n"
            "transformers.AutoModelForCausalLM.from_pretrained(sys.argv[3])\n")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "src"), str(ROOT / "tests"), str(tmp_path / "m")],
                         capture_output=True, text=True, env=smk_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "it/s" not in out.stderr and "%|" not in out.stderr, out.stderr[-2000:]
