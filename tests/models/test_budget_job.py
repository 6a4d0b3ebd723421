"""A job's `max_batch_tokens: auto` settles after what it keeps: on a CPU the fixed number, whatever
the job builds; on a GPU (its free memory faked here) the budget the memory left after the model and
the replacement holds, less the kept streams and a second replacement (engine.budget.reserve)."""

import torch
from helpers import card_for, ioi_shaped, tiny_model

from circuitloc.engine import budget
from circuitloc.engine.job import AblationJob
from circuitloc.engine.settings import JobSettings
from circuitloc.tasks.common import mark_scoring


def test_a_mean_job_settles_its_budget_after_its_replacement(tmp_path, monkeypatch):
    from helpers import word_tokenizer

    tiny_model("qwen_gqa", 40).save_pretrained(tmp_path)
    word_tokenizer().save_pretrained(tmp_path)
    card = card_for(tmp_path)
    data = mark_scoring(ioi_shaped(12, 2, seed=2), 6)
    aj = AblationJob(JobSettings(card=card, batch_tokens="auto", task="ioi", min_group=2, seed=0), data,
                     "mean-query", self_check=False)
    assert aj.scanner.max_batch_tokens == budget.CPU_TOKENS  # the CPU's number, after the replacement too
    repl = sum(t.numel() * t.element_size() for t in aj.scanner.replacement.values())
    assert repl > 0
    keeps = budget.reserve(card, aj.prompts.input_ids.numel(), repl)
    assert keeps == budget.KEPT_STREAMS * card.n_layers * card.d_model * 4 * aj.prompts.input_ids.numel() + repl
    free = 500 * budget.token_bytes(card) + keeps  # 400 tokens' room once the job's keeps are set aside
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free, 2 * free))
    aj.device = "cuda"
    aj._settle_budget()
    assert aj.scanner.max_batch_tokens == budget.auto_tokens(free - keeps, card) == 400
