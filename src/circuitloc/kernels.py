"""One CPU kernel path for a toy's training, so that another machine trains the same bits.

Torch chooses its CPU kernels when a process starts: ATen's vectorised loops by the widest
instruction set the CPU has (ATEN_CPU_CAPABILITY overrides it), MKL's matrix products by the CPU's
code path (MKL_CBWR, MKL's conditional numerical reproducibility, fixes it) and oneDNN's by
ONEDNN_MAX_CPU_ISA. Two CPUs that differ there round differently, and 900 steps of training turn
the rounding into other weights. `pin()` fixes all three to PINNED before torch is imported (the
toy's training job, workflow/scripts/build_model.py, calls it first: this module imports no
torch); `deterministic()` asks torch for deterministic algorithms while the toy trains (one thread
is the recipe's default: `threads`; bench/toy_kernels.py found 2 threads bit-identical to 1).

A toy recipe's `kernels` chooses: `host` (the default: the CPU's widest kernels, as before) or
`pinned` (the sweep configs: AVX2 for all three, which every x86-64 CPU since 2013-2015 has). An
ARM CPU has none of these switches and trains on its own kernels: `pin` leaves it alone.
bench/toy_kernels.py measures what each switch changes (docs/sweep.md quotes it).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys

# AVX2 for all three libraries: the widest path every current x86-64 CPU (Intel and AMD) has
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
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


def check(choice: str) -> None:
    """A clear error when a recipe asks for pinned kernels that this process does not have (torch
    was imported before `pin`, or the environment says otherwise): its toy would train on the host's."""
    if choice != "pinned" or not applies():
        return
    wrong = {k: os.environ.get(k) for k, v in PINNED.items() if os.environ.get(k) != v}
    if wrong:
        raise RuntimeError(f"toy recipe: kernels: pinned, but this process's kernel environment is {wrong}: call "
                           "circuitloc.kernels.pin() before torch is imported (workflow/scripts/build_model.py does)")


@contextlib.contextmanager
def deterministic():
    """Torch's deterministic algorithms while the block runs (none of the toy's CPU ops is
    nondeterministic today; this keeps a future one from slipping in silently), restored after."""
    import torch

    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)
