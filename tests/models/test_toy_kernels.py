"""A pinned toy recipe trains to the same bits whatever kernel path the machine would take
(circuitloc.kernels; the sweep configs' `kernels: pinned`), and the pinning is what makes it so:
the same toy unpinned under another ATen path ends elsewhere. Each training runs in a fresh process
(torch reads the switches once, when it starts): bench/toy_kernels.py, 20 steps of a sweep toy."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from circuitloc import kernels

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the kernel switches are x86-64's")


def _train(tmp_path, name, env):
    out = tmp_path / f"{name}.safetensors"
    base = {k: v for k, v in os.environ.items() if k not in (*kernels.PINNED, "CIRCUITLOC_KERNELS")}
    subprocess.run([sys.executable, str(ROOT / "bench" / "toy_kernels.py"), "--steps", "20", "--worker", str(out)],
                   env={**base, "OMP_NUM_THREADS": "1", **env}, check=True, cwd=ROOT, timeout=300)
    from safetensors.torch import load_file

    return load_file(str(out))


def test_pinned_training_ignores_the_hosts_kernel_path_and_unpinned_does_not(tmp_path):
    pinned_low = _train(tmp_path, "pinned_low", {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"})
    pinned_host = _train(tmp_path, "pinned_host", {})
    assert all(torch.equal(pinned_low[k], pinned_host[k]) for k in pinned_host)
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this CPU has no vectorised ATen path to differ from")
    unpinned_low = _train(tmp_path, "unpinned_low", {"CIRCUITLOC_KERNELS": "host", "ATEN_CPU_CAPABILITY": "default"})
    assert not all(torch.equal(unpinned_low[k], pinned_host[k]) for k in pinned_host)


def test_pin_refuses_after_torch_and_a_pinned_recipe_refuses_an_unpinned_process(monkeypatch):
    """torch is imported here, so its kernels are chosen: pinning now would be a silent no-op."""
    monkeypatch.delenv("CIRCUITLOC_KERNELS", raising=False)
    for k in kernels.PINNED:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(RuntimeError, match="torch is already imported"):
        kernels.pin("pinned")
    with pytest.raises(RuntimeError, match="kernels: pinned, but this process's kernel environment"):
        kernels.check("pinned")
    kernels.check("host")  # the default: nothing to check
    with pytest.raises(ValueError, match="kernels must be one of"):
        kernels.pin("fast")
    from circuitloc.errors import ToyTrainingError
    from circuitloc.models.toy.recipe import resolve_spec

    with pytest.raises(ToyTrainingError, match="kernels must be 'host' or 'pinned'"):
        resolve_spec({"kernels": "fast"})
