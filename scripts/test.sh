#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the runtime's GoogleTests
# (ctest) and the pytest suites.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== runtime GoogleTests (ctest)"
cmake -S . -B build/runtime-tests -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DOPENMTIA_BUILD_TORCH=OFF -DOPENMTIA_BUILD_TESTS=ON >/dev/null
cmake --build build/runtime-tests
ctest --test-dir build/runtime-tests --output-on-failure -j2

echo "== pytest"
# No test may hang CI: each has 600 s (pytest-timeout), but the full
# conformance run, 1800 s (it takes about 8 minutes on 2 cores); the whole
# run 40 minutes.
timeout -k 30 2400 .venv/bin/python -m pytest tests -q -p timeout --timeout=600 --timeout-method=thread "$@"

echo "== pytest on the C reference driver (OPENMTIA_DRIVER=reference: synchronous streams)"
# suites that do not depend on asynchrony (the driver conformance tests ran
# on both drivers under ctest above)
OPENMTIA_DRIVER=reference timeout -k 30 900 .venv/bin/python -m pytest -q -p timeout --timeout=600 \
  --timeout-method=thread tests/test_attention.py tests/test_autoload.py tests/test_compile_triton.py \
  tests/test_distributed_netns.py tests/test_conformance_compiled.py "$@"
