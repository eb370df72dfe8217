#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the runtime's GoogleTests
# (ctest) and the pytest suites.
set -euo pipefail
cd "$(dirname "$0")/.."
section() { echo "== $1 (at ${SECONDS}s)"; }
section "layering: no include runs up a layer (tools/check_layers.py)"
python3 tools/check_layers.py
OPENMTIA_TEST_MODULE=1 bash scripts/setup.sh  # (with the test-only module openmtia._C_test)

section "runtime GoogleTests (ctest)"
cmake -S . -B build/runtime-tests -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DOPENMTIA_BUILD_TORCH=OFF -DOPENMTIA_BUILD_TESTS=ON >/dev/null
cmake --build build/runtime-tests
ctest --test-dir build/runtime-tests --output-on-failure -j2

section "pytest"
# No test may hang CI: each has 600 s (pytest-timeout), but the full
# conformance run, 1800 s (it takes about 8 minutes on 2 cores); the whole
# run 45 minutes.
timeout -k 30 2700 .venv/bin/python -m pytest tests -q -p timeout --timeout=600 --timeout-method=thread "$@"

section "pytest on the C reference driver (OPENMTIA_DRIVER=reference: synchronous streams)"
# Every test passes on it but those marked needs_async (a held stream, a call
# that returns before its task ran: tests/conftest.py), which it deselects.
# CI runs these suites (every suite on it takes about 9 minutes; the driver
# conformance tests ran on both drivers under ctest above).
OPENMTIA_DRIVER=reference timeout -k 30 900 .venv/bin/python -m pytest -q -p timeout --timeout=600 \
  --timeout-method=thread -m "not needs_async" tests/test_async.py tests/test_new_shapes.py tests/test_ops.py \
  tests/test_pointwise.py tests/test_copy.py tests/test_device.py tests/test_errors.py tests/test_memory.py \
  tests/test_graphs.py tests/test_random.py tests/test_low_precision.py tests/test_low_precision_tables.py \
  tests/test_attention.py tests/test_compile.py tests/test_compile_triton.py tests/test_driver.py \
  tests/test_transformers.py tests/test_main_job.py tests/test_distributed_netns.py tests/test_extension_api.py \
  tests/test_cpp_wrapper.py tests/test_sparse.py tests/test_foreach.py tests/test_profiler.py "$@"

section "pytest under OPENMTIA_STRICT_MEMORY=1 (device memory the host cannot touch)"
# A host thread's access to device memory ends the process naming it
# (tests/test_strict_memory.py); these suites check that nothing on the host
# side touches it and that staging gives CPU's results: ops, the fallback,
# copies, graphs, compile (both backends), the HF models, DDP, the main job.
OPENMTIA_STRICT_MEMORY=1 timeout -k 30 900 .venv/bin/python -X faulthandler -m pytest -q -p timeout \
  --timeout=600 --timeout-method=thread tests/test_async.py tests/test_ops.py tests/test_pointwise.py \
  tests/test_copy.py tests/test_errors.py tests/test_memory.py tests/test_graphs.py tests/test_random.py \
  tests/test_attention.py tests/test_compile.py tests/test_compile_triton.py tests/test_transformers.py \
  tests/test_main_job.py tests/test_distributed_netns.py tests/test_extension_api.py tests/test_cpp_wrapper.py \
  tests/test_aoti.py tests/test_sparse.py tests/test_help_first.py tests/test_foreach.py "$@"

section "pytest of the execution suites under OPENMTIA_HELP_FIRST=0 (a waiting host thread only waits)"
# The default (help-first waits: a waiting host thread runs the queued tasks)
# ran every suite above; these suites cover the execution engine's semantics
# (asynchrony, errors, streams and events, graphs, the stream-ordered
# allocator) on the other path.
# Inline launches off too: every task runs on its stream's worker.
OPENMTIA_HELP_FIRST=0 OPENMTIA_INLINE_LAUNCHES=never timeout -k 30 900 .venv/bin/python -m pytest -q -p timeout \
  --timeout=600 --timeout-method=thread tests/test_async.py tests/test_errors.py tests/test_graphs.py \
  tests/test_engine.py tests/test_help_first.py tests/test_copy.py tests/test_memory.py tests/test_foreach.py "$@"

section "pytest of the execution suites under OPENMTIA_INLINE_LAUNCHES=always (launches onto idle streams run inline)"
# The default (never) hands every task to a worker: these suites force the
# inline path, collectives across ranks included (auto, which chooses by the
# cores' load, has its own tests in test_inline_launches.py). Tests that hold a stream
# with work that waits for the host still run (that work never runs inline).
OPENMTIA_INLINE_LAUNCHES=always timeout -k 30 900 .venv/bin/python -m pytest -q -p timeout --timeout=600 \
  --timeout-method=thread tests/test_async.py tests/test_errors.py tests/test_graphs.py tests/test_engine.py \
  tests/test_help_first.py tests/test_copy.py tests/test_memory.py tests/test_foreach.py \
  tests/test_inline_launches.py tests/test_distributed_netns.py "$@"
section "done"
