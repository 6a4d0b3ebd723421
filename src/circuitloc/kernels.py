"""One CPU kernel path for a toy's training, so that another machine trains the same bits.

Torch chooses its CPU kernels when a process starts: ATen's vectorised loops by the widest
instruction set the CPU has (ATEN_CPU_CAPABILITY overrides it), MKL's matrix products by the CPU's
code path (MKL_CBWR, MKL's conditional numerical reproducibility, fixes it) and oneDNN's by
ONEDNN_MAX_CPU_ISA. Two CPUs that differ there round differently, and 900 steps of training turn
the rounding into other weights. `pin()` fixes all three to PINNED before torch is imported (the
toy's training job, workflow/scripts/build_model.py, calls it first: this module imports no
torch); `deterministic()` asks torch for deterministic algorithms and keeps oneDNN out while the
toy trains (one thread is the recipe's default: `threads`).

MKL's branch is COMPATIBLE (SSE2 without the approximate reciprocal instructions, whose results
differ between CPU makers): it is the only branch MKL honours on a CPU that is not Intel's. On an
AMD EPYC every other value (AVX2, AVX512, SSE4_2, SSE2) falls back to MKL's automatic branch and
trains the same bits as AUTO, while an Intel CPU takes the branch it is given: the AVX2 pin of
earlier versions trained other toys on Intel than on AMD (bench/toy_kernels.py --settings
mkl_branches shows the fallback on the machine it runs on). ATen's AVX2 path is the same machine
code on every CPU that has AVX2 and uses only exactly rounded instructions; a CPU without AVX2
cannot take it, and `check` refuses to train a pinned toy there rather than train other bits.

MKL_CBWR does not reach MKL's vector math (VML), through which torch computes sqrt, cos, sin, exp
and the like of a float tensor: its last bit follows the CPU, so the toy's training takes none of
them (circuitloc.models.toy.exact: Adam's square root and the rotary table, rounded exactly).
bench/toy_vml.py compares a pinned training op by op with the same training under an emulated CPU
of another maker (QEMU), which is how that was found and how it is checked.

A toy recipe's `kernels` chooses: `host` (the recipe's default: the CPU's widest kernels, faster,
but another CPU may train another toy) or `pinned` (the default config's toys and the sweep
configs': the same toy on every x86-64 CPU with AVX2, Intel or AMD). An ARM CPU has none of these
switches and trains on its own kernels: `pin` leaves it alone. tests/models/test_toy_digests.py
compares pinned trainings with sha256 digests stored in the repository
(tests/models/toy_digests.json), so every machine the tests run on checks the claim.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys

# ATen's and oneDNN's AVX2 paths (every x86-64 CPU since 2013-2015 has AVX2) and MKL's COMPATIBLE
# branch, the one MKL honours on Intel and AMD alike (see above)
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
CHOICES = ("host", "pinned")


def pin(choice: str = "pinned") -> dict:
    """Set PINNED in this process's environment (`choice` pinned; host: nothing). Must run before
    torch is imported, which reads them once; a clear error if it already was. Returns what it set.
    CIRCUITLOC_KERNELS=host in the environment overrides (bench/toy_kernels.py's unpinned runs)."""
    if choice not in CHOICES:
        raise ValueError(f"toy recipe: kernels must be one of {CHOICES}, got {choice!r}")
    if choice == "host" or not applies():
        return {}
    if "torch" in sys.modules:
        raise RuntimeError("kernels.pin: torch is already imported, so its CPU kernels are chosen; pin first")
    os.environ.update(PINNED)
    return dict(PINNED)


def applies() -> bool:
    """Whether pinning means anything here: an x86-64 CPU, and no CIRCUITLOC_KERNELS=host override."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return x86 and os.environ.get("CIRCUITLOC_KERNELS") != "host"


def has_avx2() -> bool:
    """Whether this CPU has AVX2 (Linux: /proc/cpuinfo's flags; elsewhere assumed)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return True


def check(choice: str) -> None:
    """A clear error when a recipe asks for pinned kernels that this process does not have (torch
    was imported before `pin`, the environment says otherwise, or the CPU lacks AVX2 and ATen would
    quietly take its generic path): its toy would train on other kernels than every other machine's."""
    if choice != "pinned" or not applies():
        return
    if not has_avx2():
        raise RuntimeError("toy recipe: kernels: pinned needs a CPU with AVX2 (the pinned kernel path); this one has "
                           "none. Set the toy's kernels: host to train on this CPU's own kernels (its toys may differ "
                           "from other machines')")
    wrong = {k: os.environ.get(k) for k, v in PINNED.items() if os.environ.get(k) != v}
    if wrong:
        raise RuntimeError(f"toy recipe: kernels: pinned, but this process's kernel environment is {wrong}: call "
                           "circuitloc.kernels.pin() before torch is imported (workflow/scripts/build_model.py does)")


@contextlib.contextmanager
def deterministic():
    """Torch's deterministic algorithms while the block runs (none of the toy's CPU ops is
    nondeterministic today; this keeps a future one from slipping in silently), and oneDNN off (its
    JIT kernels size their blocks by the CPU's caches), both restored after."""
    import torch

    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    onednn = torch.backends.mkldnn.enabled
    torch.use_deterministic_algorithms(True)
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)
        torch.backends.mkldnn.enabled = onednn
