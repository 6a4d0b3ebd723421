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
# a venv starts with the pip its Python bundled (3.11: pip 23.2), which resolves this dependency set in
# about 40 s, where pip 25 or later takes 15 s; where the index is not reachable, the bundled pip stays
pip install --upgrade "pip>=25" 2>/dev/null || true
# pip byte-compiles one file at a time: install without compiling, then compile on every core (below)
pipi() { pip install --no-compile "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    pipi "torch==${TORCH_VERSION}"
  else
    # a local CPU wheel (pip's find-links) if there is one, its dependencies from the ordinary index;
    # else PyTorch's CPU index
    if pipi --no-index --no-deps "torch==${TORCH_VERSION}" 2>/dev/null; then
      pipi "torch==${TORCH_VERSION}"
    else
      pipi "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
    fi
  fi
fi
pipi -e ".[test,slurm]"
# as pip would (a file that does not compile is skipped, as pip skips it), two or more at once; the
# packages' own test suites are never imported and are left out (a sixth of the files), and so are
# transformers' model folders but those of the architectures the tests build (2,700 files: any other
# compiles when first imported) and the installers and wandb, which no job imports: 19-21 s -> 16-18 s
SKIP='/tests?/|/site-packages/(pip|setuptools|wandb)/|/transformers/models/(?!(auto|qwen2|qwen3|llama|mistral|gemma|gemma2|gemma3|gpt_neox|gpt_neo|gptj|gpt2|opt|falcon|phi|phi3|stablelm|olmo|olmo2)/)'
.venv/bin/python -m compileall -q -j 0 -x "$SKIP" .venv/lib > /dev/null 2>&1 || true
.venv/bin/python -c "import torch, circuitloc; print('circuitloc ready: torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
