#!/usr/bin/env bash
# Builds the C++ program examples/aoti_cpp/main.cpp against the installed
# torch and openmtia (bash scripts/setup.sh first), and packages the example
# model for it with Python (package.py). Then, without Python:
#   build/aoti_cpp/aoti_mtia build/aoti_cpp/model.pt2 build/aoti_cpp/input.pt build/aoti_cpp/output.pt
# OUT (default build/aoti_cpp): where the program and the package go.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/aoti_cpp}
PY=${PYTHON:-.venv/bin/python}
prefix=$("$PY" -c "import torch.utils, openmtia; print(torch.utils.cmake_prefix_path + ';' + openmtia.cmake_prefix_path)")
cmake -S examples/aoti_cpp -B "$OUT" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$OUT"
"$PY" examples/aoti_cpp/package.py "$OUT"
echo "built: $OUT/aoti_mtia"
