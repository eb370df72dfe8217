#!/usr/bin/env bash
# Sets up a fresh machine for openmtia: build tools (Debian), a virtualenv in
# .venv with torch==2.13.0 (the CPU wheel; never another torch), and openmtia
# itself built with CMake + ninja against that torch. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} from Debian"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# torch pinned: takes the CPU wheel present on the machine
if ! "$VPY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  "$VPY" -m pip install -q torch==2.13.0
fi
# build: setuptools; tests: pytest, plus expecttest and numpy (needed to import
# PyTorch's own OpInfo test database)
"$VPY" -c "import setuptools, pytest, expecttest, numpy, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" 2>/dev/null ||
  "$VPY" -m pip install -q "setuptools>=64" pytest expecttest numpy
# the tests' per-test time limit (scripts/test.sh): pinned; `pip install
# --dry-run` shows it needs nothing but pytest
"$VPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('pytest-timeout') != '2.4.0')" 2>/dev/null ||
  "$VPY" -m pip install -q pytest-timeout==2.4.0
# the Triton path's test dependency (OPENMTIA_INDUCTOR_BACKEND=triton): pinned,
# it needs nothing else (checked with pip install --dry-run: no torch)
"$VPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('triton') != '3.9.0')" 2>/dev/null ||
  "$VPY" -m pip install -q triton==3.9.0
# the main job's progress bar and charts (tqdm, matplotlib) and the model tests'
# transformers: pinned; `pip install --dry-run` shows they need no torch
"$VPY" -c "import importlib.metadata as m, sys; sys.exit(any(m.version(p) != v for p, v in [('tqdm', '4.70.1'), ('matplotlib', '3.11.2'), ('transformers', '5.23.0')]))" 2>/dev/null ||
  "$VPY" -m pip install -q tqdm==4.70.1 matplotlib==3.11.2 transformers==5.23.0
# recommendation models (torchrec, FBGEMM's CPU build): pinned as a pair that
# loads with torch 2.13 (fbgemm-gpu-cpu 1.9.0's libraries do not). torchrec
# requires fbgemm-gpu, FBGEMM's CUDA build (500 MB, a second fbgemm_gpu module):
# it is installed --no-deps, its other requirements pinned here (`pip install
# --dry-run` shows they need no torch). openmtia itself does not require them.
"$VPY" -c "import importlib.metadata as m, sys; sys.exit(any(m.version(p) != v for p, v in [('fbgemm-gpu-cpu', '1.8.0'), ('torchmetrics', '1.0.3'), ('tensordict', '0.15.3'), ('pyre-extensions', '0.0.32'), ('torchrec', '1.8.0')]))" 2>/dev/null || {
  "$VPY" -m pip install -q fbgemm-gpu-cpu==1.8.0 torchmetrics==1.0.3 tensordict==0.15.3 pyre-extensions==0.0.32
  "$VPY" -m pip install -q --no-deps torchrec==1.8.0
}
# Holistic Trace Analysis (reads torch.profiler traces, real MTIA's too:
# docs/profiling.md), pinned, --no-deps: it requires jupyterlab and pytest
# but imports neither; what it imports is pinned here (pandas 2: its
# critical path fails under pandas 3). `pip install --dry-run` shows they
# need no torch.
"$VPY" -c "import importlib.metadata as m, sys; sys.exit(any(m.version(p) != v for p, v in [('holistictraceanalysis', '0.5.0'), ('pandas', '2.3.3'), ('plotly', '7.1.0'), ('narwhals', '2.29.0'), ('psutil', '7.2.2')]))" 2>/dev/null || {
  "$VPY" -m pip install -q pandas==2.3.3 plotly==7.1.0 narwhals==2.29.0 psutil==7.2.2
  "$VPY" -m pip install -q --no-deps holistictraceanalysis==0.5.0
}
# --no-build-isolation: build against the torch above, never fetch another one
"$VPY" -m pip install -q --no-build-isolation -e .
"$VPY" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
echo "setup: ready ($("$VPY" -c 'import torch; print("torch", torch.__version__, "| mtia devices:", torch.mtia.device_count())'))"
