#!/usr/bin/env bash
# Create .venv with circuitloc and its tools. Never pulls a CUDA torch onto a machine without a GPU:
#   - a torch already in .venv is kept (GPU users: install your own torch first, then run this);
#   - with an NVIDIA GPU (nvidia-smi works), the default PyPI torch (CUDA) is installed;
#   - otherwise torch==2.13.0 as a CPU build: a local wheel if pip has one (dependencies from the
#     ordinary index), else PyTorch's CPU index.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    pip install "torch==${TORCH_VERSION}"
  else
    # a local CPU wheel (pip's find-links) if there is one, its dependencies from the ordinary index;
    # else PyTorch's CPU index
    if pip install --no-index --no-deps "torch==${TORCH_VERSION}" 2>/dev/null; then
      pip install "torch==${TORCH_VERSION}"
    else
      pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
    fi
  fi
fi
pip install -e ".[test,slurm]"
.venv/bin/python -c "import torch, circuitloc; print('circuitloc ready: torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
