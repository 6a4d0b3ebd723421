"""On a toy model trained on repeated sequences, the induction head sits above a previous-token
head: the two-layer circuit the induction task is meant to find."""

import pytest
import torch

from circuitloc.tasks.induction import induction_scores
from circuitloc.models.card import make_card
from circuitloc.models.load import load, load_tokenizer
from circuitloc.models.toy import train_toy
from circuitloc.tasks import induction
from circuitloc.tasks.common import pad_right


def _previous_token_scores(bridge, input_ids, last_pos, n_layers: int) -> torch.Tensor:
    """[L, H]: mean attention from each real position t >= 1 to t - 1 (TransformerLens' patterns)."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]
    with torch.no_grad():
        _, cache = bridge.run_with_cache(input_ids, names_filter=lambda n: n in names)
    t = torch.arange(1, input_ids.shape[1])
    mask = (t[None, :] <= last_pos[:, None]).float()  # [N, T-1]: real positions only
    return torch.stack([(cache[n].float().cpu()[:, :, t, t - 1] * mask[:, None]).sum((0, 2)) / mask.sum()
                        for n in names])


@pytest.mark.slow
def test_induction_head_is_above_a_previous_token_head(tmp_path):
    spec = {"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "steps": 250, "batch": 32, "lr": 5e-3,
            "loss": "targets",  # the sweep's faster recipe: induction is learned by step 250 (ICL loss 0.13)
            "warmup": 50, "mix": {"ioi": 0, "induction": 1, "facts": 0}, "repeat_len": [6, 20],
            "pool_size": 200, "n_facts": 10, "eval": {"n_ioi": 10, "n_induction": 50},
            "acceptance": {"enforce": False}}
    result = train_toy(spec, tmp_path / "toy", log=lambda *a: None)
    # induction was learned (about 8 s; 0.13 here, and at 400 steps 0.06: the heads below are as
    # clear, induction 0.92 and previous-token 0.71 where 400 steps give 0.97 and 0.80)
    assert result["checks"]["icl_loss"] < 0.5, result["checks"]
    tok = load_tokenizer(str(tmp_path / "toy"))
    card = make_card("toy", {"source": "toy"}, str(tmp_path / "toy"), tok)
    bridge, tok = load(card)
    df = induction.sequences(induction.candidate_tokens(tok), 50, (4, 8), (10, 16), seed=5, bos_id=tok.bos_token_id)
    ids, last = pad_right(df["input_ids"].to_list(), tok.pad_token_id)
    ind = induction_scores(bridge, ids, last, torch.tensor(df["b_pos"].to_numpy()), 2)
    prev = _previous_token_scores(bridge, ids, last, 2)
    top_layer, top_head = divmod(int(ind.argmax()), 4)
    assert top_layer == 1 and ind.max() > 0.3, ind
    assert prev[0].max() > 0.5 and prev[0].max() > prev[1].max(), prev
