"""The toy model source: tokenizer, controlled MHA/GQA pair, determinism, acceptance gate."""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

from circuitloc.errors import ToyTrainingError  # noqa: E402
from circuitloc.models import toy  # noqa: E402
from circuitloc.models.toy.corpus import _counts  # noqa: E402
from circuitloc.tasks import induction as induction_task  # noqa: E402
from circuitloc.tasks import ioi as ioi_task  # noqa: E402
from circuitloc.tasks.common import single_token  # noqa: E402

FACTS = [
    ("geography", "France", "capital", "Paris", "The capital of France is"),
    ("geography", "Italy", "capital", "Rome", "The capital of Italy is"),
    ("geography", "Spain", "capital", "Madrid", "The capital of Spain is"),
    ("geography", "Japan", "capital", "Tokyo", "The capital of Japan is"),
    ("geography", "Egypt", "capital", "Cairo", "The capital of Egypt is"),
    ("geography", "Norway", "capital", "Oslo", "The capital of Norway is"),
    ("language", "Germany", "language", "German", "The official language of Germany is"),
    ("language", "Greece", "language", "Greek", "The official language of Greece is"),
    ("chemistry", "gold", "symbol", "Au", "The chemical symbol for gold is"),
    ("chemistry", "iron", "symbol", "Fe", "The chemical symbol for iron is"),
    ("animals", "dog", "young", "puppy", "The young of a dog is called a"),
    ("animals", "cat", "young", "kitten", "The young of a cat is called a"),
    ("geography", "USA", "capital", "Washington D.C.", "The capital of the USA is"),  # two-word answer
]

TINY = {"n_layers": 1, "d_model": 32, "n_heads": 4, "n_kv_heads": 4, "steps": 20, "batch": 16,
        "warmup": 5, "n_facts": 8, "pool_size": 250, "log_every": 0,
        "eval": {"n_ioi": 20, "n_induction": 20},
        "acceptance": {"enforce": False}}


@pytest.fixture(scope="module")
def facts_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("facts") / "facts.tsv"
    lines = ["domain\tsubject\trelation\tanswer\tnatural\tqa"]
    lines += ["\t".join([d, s, r, a, n, f"Q: {n}?\\nA:"]) for d, s, r, a, n in FACTS]
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def spec(facts_path, **kw):
    s = json.loads(json.dumps(TINY))
    s["facts_path"] = facts_path
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(s.get(k), dict):
            s[k].update(v)
        else:
            s[k] = v
    return s


@pytest.fixture(scope="module")
def tok_and_taught(facts_path):
    from circuitloc.tasks import facts as facts_task

    taught = toy.select_facts(facts_task.load(facts_path), 100, 0)
    tok, pool = toy.build_tokenizer(ioi_task.load_resources(), taught, 300, 0)
    return tok, taught, pool


def test_tokenizer_properties(tok_and_taught):
    tok, taught, pool = tok_and_taught
    for k in ("bos", "eos", "pad", "unk"):
        assert getattr(tok, f"{k}_token") == f"<{k}>"
        assert getattr(tok, f"{k}_token_id") is not None
    res = ioi_task.load_resources()
    for name in res["names"] + res["places"] + res["objects"]:
        tid = single_token(tok, name)
        assert tid is not None, name
        assert tok.decode([tid]) == name
    assert tok(" Mary", add_special_tokens=False).input_ids == tok("Mary", add_special_tokens=False).input_ids
    assert len(tok(" Mary", add_special_tokens=False).input_ids) == 1
    # punctuation is split off; no special token is added implicitly
    assert len(tok("Then, Mary.", add_special_tokens=False).input_ids) == 4
    assert tok("Mary").input_ids == tok("Mary", add_special_tokens=False).input_ids
    cand = induction_task.candidate_tokens(tok)
    assert len(cand) >= 300 and not set(cand) & set(tok.all_special_ids)
    assert all(single_token(tok, w) in cand for w in pool)
    assert all(3 <= len(w) <= 10 and w.isalpha() and w.islower() for w in pool)
    assert len(set(pool)) == 300
    # every taught fact: answer one token, prompt without <unk>; multi-word answers are never taught
    assert "Washington D.C." not in set(taught["answer"]) and len(taught) == 12
    for r in taught.iter_rows(named=True):
        assert single_token(tok, r["answer"]) is not None
        assert tok.unk_token_id not in tok(r["natural"], add_special_tokens=False).input_ids


def test_pseudo_words_and_fact_choice_are_seeded(facts_path):
    from circuitloc.tasks import facts as facts_task

    assert toy.pseudo_words(50, 3) == toy.pseudo_words(50, 3) != toy.pseudo_words(50, 4)
    df = facts_task.load(facts_path)
    a, b = toy.select_facts(df, 5, 0), toy.select_facts(df, 5, 0)
    assert list(a["subject"]) == list(b["subject"])
    assert list(toy.select_facts(df, 5, 1)["subject"]) != list(a["subject"])


def test_mix_counts_sum_to_batch():
    assert _counts({"ioi": 22, "induction": 29, "facts": 13}, 64) == {"ioi": 22, "induction": 29, "facts": 13}
    c = _counts({"ioi": 0.35, "induction": 0.45, "facts": 0.2}, 50)
    assert sum(c.values()) == 50 and c["induction"] > c["ioi"] > c["facts"]


def test_mha_gqa_pair_differs_only_in_kv(tok_and_taught):
    tok = tok_and_taught[0]
    base = {"n_layers": 2, "d_model": 64, "n_heads": 8, "seed": 0}
    mha = toy.build_model(toy.resolve_spec({**base, "n_kv_heads": 8}), len(tok), tok).state_dict()
    gqa = toy.build_model(toy.resolve_spec({**base, "n_kv_heads": 2}), len(tok), tok).state_dict()
    assert mha.keys() == gqa.keys()
    differ = {k for k in mha if mha[k].shape != gqa[k].shape}
    assert differ and all((".k_proj." in k or ".v_proj." in k) for k in differ)
    assert {k for k in mha if ".k_proj." in k or ".v_proj." in k} == differ
    for k in differ:
        assert mha[k].shape[0] == 4 * gqa[k].shape[0]
    # same seed: every shared parameter starts identical
    assert all(torch.equal(mha[k], gqa[k]) for k in mha if k not in differ)


def test_short_training_is_deterministic(facts_path, tmp_path):
    from safetensors.torch import load_file

    s = spec(facts_path)
    r1 = toy.train_toy(s, tmp_path / "a", log=lambda m: None)
    r2 = toy.train_toy(s, tmp_path / "b", log=lambda m: None)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert all(v.dtype == torch.float32 for v in a.values())
    assert r1["checks"] == r2["checks"] and r1["steps"] == 20
    assert set(r1["checks"]) >= {"ioi_ld", "ioi_acc", "icl_loss", "facts_acc", "passed", "thresholds"}
    for f in ("config.json", "tokenizer.json", "toy_facts.json", "toy_checks.json"):
        assert (tmp_path / "a" / f).exists()
    # the saved model and tokenizer load back through the ordinary transformers entry points
    from transformers import AutoModelForCausalLM

    from circuitloc.models.load import load_tokenizer

    tok = load_tokenizer(str(tmp_path / "a"))
    sentence = "Then, Mary and John went to the store. John gave a drink to"
    assert tok.convert_ids_to_tokens(tok(sentence, add_special_tokens=False).input_ids) == \
        ["Then", ",", "Mary", "and", "John", "went", "to", "the", "store", ".", "John", "gave", "a", "drink", "to"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert model.config.tie_word_embeddings and model.config.num_key_value_heads == 4
    assert len(tok(" Mary", add_special_tokens=False).input_ids) == 1
    assert tok.bos_token_id == model.config.bos_token_id
    r3 = toy.train_toy(spec(facts_path, seed=1), tmp_path / "c", log=lambda m: None)
    assert r3["checks"] != r1["checks"]


def test_targets_loss_projects_only_labelled_positions_and_equals_the_full_loss(facts_path):
    """`loss: targets` projects only the labelled positions onto the vocabulary: the same loss and
    gradients as cross-entropy over every position's logits with the unlabelled ones ignored."""
    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import batch_loss, prepare

    run = prepare(resolve_spec(spec(facts_path, loss="targets", batch=24)))
    ids, labels = run.corpus.batch(3)
    assert 0 < int((labels[:, 1:] != -100).sum()) < labels[:, 1:].numel() // 2  # few positions carry a label
    fast = batch_loss(run, ids, labels)
    fast_grads = torch.autograd.grad(fast, list(run.model.parameters()))
    logits = run.model(input_ids=ids).logits
    full = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             labels[:, 1:].reshape(-1), ignore_index=-100)
    full_grads = torch.autograd.grad(full, list(run.model.parameters()))
    assert abs(fast.item() - full.item()) < 1e-5
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(fast_grads, full_grads, strict=True))


def test_failed_acceptance_raises_and_writes_nothing(facts_path, tmp_path):
    out = tmp_path / "sub" / "toy"
    s = spec(facts_path, steps=5, acceptance={"enforce": True, "icl_loss": -1.0})
    with pytest.raises(ToyTrainingError) as e:
        toy.train_toy(s, out, log=lambda m: None)
    msg = str(e.value)
    assert "icl_loss" in msg and "-1.0" in msg and "steps" in msg and "seed" in msg
    assert not out.exists()
    assert not (tmp_path / "sub").exists() or not any((tmp_path / "sub").iterdir())


def test_reduced_budget_training_improves_loss(facts_path, tmp_path):
    logs = []
    s = spec(facts_path, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, steps=300, batch=32,
             warmup=20, lr=3e-3, log_every=10)
    r = toy.train_toy(s, tmp_path / "t", log=logs.append)
    hist = json.loads((tmp_path / "t" / "toy_checks.json").read_text())["history"]
    assert hist[0]["step"] == 10 and hist[-1]["step"] == 300
    assert hist[-1]["loss"] < hist[0]["loss"] - 1.5
    assert r["checks"]["facts_acc"] > 0.5  # 8 facts are memorised within 300 steps
    assert r["train_seconds"] > 0  # recorded (speed is bench/'s business, not a test's)
    assert any("toy step 300/300" in m for m in logs)


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "resources", "facts", "facts.tsv")),
                    reason="curated facts file not present")
def test_default_vocabulary_from_shipped_resources():
    from circuitloc.tasks import facts as facts_task

    s = toy.resolve_spec({})
    taught = toy.select_facts(facts_task.load(), s["n_facts"], s["seed"])
    assert len(taught) == s["n_facts"]
    tok, _ = toy.build_tokenizer(ioi_task.load_resources(), taught, s["pool_size"], s["seed"])
    df, _ = facts_task.build(taught, tok, True, "natural")
    assert len(df) == len(taught)
    assert all(tok.unk_token_id not in ids for ids in df["input_ids"])
    assert len(induction_task.candidate_tokens(tok)) >= s["pool_size"]


def test_checkpoint_is_copied_and_rechecked_here(facts_path, tmp_path):
    from safetensors.torch import load_file

    trained = toy.train_toy(spec(facts_path), tmp_path / "trained", log=lambda m: None)
    ck = {"checkpoint": str(tmp_path / "trained"), "eval": TINY["eval"], "acceptance": {"enforce": False}}
    r = toy.train_toy(ck, tmp_path / "copy", log=lambda m: None)
    # the held-out checks are recomputed from the stored weights, recipe and taught facts: same numbers
    assert r["checks"] == trained["checks"] and r["checkpoint"] == ck["checkpoint"]
    a, b = load_file(tmp_path / "trained" / "model.safetensors"), load_file(tmp_path / "copy" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a spec that contradicts the stored recipe is refused by name; so is a failing checkpoint
    with pytest.raises(ToyTrainingError, match="toy.n_kv_heads"):
        toy.train_toy({**ck, "n_kv_heads": 2}, tmp_path / "bad", log=lambda m: None)
    with pytest.raises(ToyTrainingError, match="failed its held-out checks"):
        toy.train_toy({**ck, "acceptance": {"enforce": True, "icl_loss": -1.0}}, tmp_path / "bad", log=lambda m: None)
    (tmp_path / "trained" / "toy_facts.json").unlink()
    with pytest.raises(ToyTrainingError, match="missing toy_facts.json"):
        toy.train_toy(ck, tmp_path / "bad", log=lambda m: None)
    assert not (tmp_path / "bad").exists()


def test_packed_rows_compute_what_each_row_computes_alone(facts_path):
    """corpus.pack puts several rows in one sequence: each row keeps its positions, attends only to
    its own earlier tokens, and its logits equal those of the padded row; the loss (both kinds) and
    its gradients equal the padded batch's, on fewer positions."""
    from circuitloc.models.toy.corpus import pack
    from circuitloc.models.toy.recipe import resolve_spec
    from circuitloc.models.toy.training import batch_loss, prepare

    for loss in ("all", "targets"):
        run = prepare(resolve_spec(spec(facts_path, loss=loss, batch=24)))
        ids, labels = run.corpus.batch(5)
        pad = run.tok.pad_token_id
        p = pack(ids, labels, pad)
        lens = (ids != pad).sum(1)
        assert p.input_ids.shape[0] < ids.shape[0] and p.input_ids.shape[1] == ids.shape[1]
        assert int((p.input_ids != pad).sum()) == int(lens.sum())  # every real token once
        assert int((p.labels != -100).sum()) == int((labels != -100).sum())
        with torch.no_grad():
            ref = run.model(input_ids=ids).logits
            out = run.model(**p.model_inputs()).logits
        # find each row in the packed sequences by its positions restarting at 0 and its tokens
        found = 0
        for r in range(ids.shape[0]):
            n = int(lens[r])
            for i in range(p.input_ids.shape[0]):
                starts = (p.position_ids[i] == 0).nonzero().flatten().tolist()
                for a in starts:
                    if a + n <= ids.shape[1] and torch.equal(p.input_ids[i, a:a + n], ids[r, :n]) \
                            and int(p.position_ids[i, a + n - 1]) == n - 1:
                        assert torch.allclose(out[i, a:a + n], ref[r, :n], atol=1e-5)
                        found += 1
                        break
                else:
                    continue
                break
        assert found == ids.shape[0]
        run.s["pack"] = True
        packed = batch_loss(run, ids, labels)
        g_packed = torch.autograd.grad(packed, list(run.model.parameters()))
        run.s["pack"] = False
        padded = batch_loss(run, ids, labels)
        g_padded = torch.autograd.grad(padded, list(run.model.parameters()))
        assert abs(packed.item() - padded.item()) < 1e-5
        assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(g_packed, g_padded, strict=True))


def test_pack_keeps_rows_apart():
    """No query reads another row's key, positions restart per row, padding reads only itself."""
    from circuitloc.models.toy.corpus import pack

    pad = 0
    ids = torch.tensor([[5, 6, 7, 8], [5, 9, 0, 0], [5, 3, 4, 0], [5, 0, 0, 0]])
    labels = torch.where(ids == pad, -100, ids)
    labels[:, 0] = -100
    p = pack(ids, labels, pad)
    # first fit in row order, 4 wide: row 2 (3 tokens) does not fit beside row 1 (2), row 3 (1) does
    assert p.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 5, 0], [5, 3, 4, 0]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 0], [0, 1, 2, 0]]
    m = p.mask[:, 0]
    for i in range(p.input_ids.shape[0]):
        starts = (p.position_ids[i] == 0) & (p.input_ids[i] != pad)
        seg = torch.cumsum(starts.long(), 0)
        real = p.input_ids[i] != pad
        for q in range(4):
            for k in range(4):
                allowed = bool(real[q] and real[k] and seg[q] == seg[k] and k <= q) or q == k
                assert bool(m[i, q, k]) == allowed
    assert int((p.labels != -100).sum()) == int((labels != -100).sum())
