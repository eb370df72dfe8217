#!/usr/bin/env bash
# Runs the runtime's GoogleTests and pytest suites against openmtia built with
# sanitizers: `address` (ASan + UBSan) or `thread` (TSan).
#
#   bash scripts/sanitize.sh address                     # every pytest suite
#   bash scripts/sanitize.sh thread tests/test_async.py  # some
#
# The sanitized build goes to build/sanitize-<kind>; its package (the Python
# files and the sanitized _C) is put first on PYTHONPATH, so the normal build
# is untouched. The sanitizer runtime is preloaded into python (which is not
# instrumented); only torch's and Python's own reports are suppressed, each
# with its reason, in scripts/sanitizers/. Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: sanitize.sh address|thread [pytest args]}
shift
case "$kind" in address|thread) ;; *) echo "sanitize.sh: address or thread, not $kind" >&2; exit 2 ;; esac
[ -x .venv/bin/python ] || bash scripts/setup.sh
PY=$PWD/.venv/bin/python
B=$PWD/build/sanitize-$kind
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPENMTIA_SANITIZE="$kind" -DOPENMTIA_BUILD_TESTS=ON -DOPENMTIA_BUILD_TEST_MODULE=ON \
  -DCMAKE_PREFIX_PATH="$($PY -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
  -DPython3_EXECUTABLE="$PY" >/dev/null
cmake --build "$B" -j "${OPENMTIA_BUILD_JOBS:-$(nproc)}"
rm -rf "$B/pkg" && mkdir -p "$B/pkg"
cp -r openmtia "$B/pkg/"
find "$B/pkg" \( -name '_C.*.so' -o -name '_C_test.*.so' -o -name 'libopenmtia.so' -o -name 'libopenmtia_aoti.so' \
  -o -name __pycache__ \) -prune -exec rm -rf {} +
cp "$B"/_C.*.so "$B"/_C_test.*.so "$B"/libopenmtia.so "$B"/libopenmtia_aoti.so "$B/pkg/openmtia/"
cp "$B"/runtime/libopenmtia_driver_*.so "$B/pkg/openmtia/"  # (the sanitized drivers)

logs=$B/reports
rm -rf "$logs" && mkdir -p "$logs"
sup=$PWD/scripts/sanitizers
if [ "$kind" = address ]; then
  preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:halt_on_error=0:abort_on_error=0:detect_odr_violation=0:suppressions=$sup/asan.supp"
  export LSAN_OPTIONS="suppressions=$sup/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=0:suppressions=$sup/ubsan.supp"
  export PYTHONMALLOC=malloc  # Python's allocations visible to ASan
else
  preload="$(gcc -print-file-name=libtsan.so)"
  # torch's OpenMP runtime (libgomp) is not built with TSan: the barriers of
  # its parallel regions are invisible, and every kernel that hands a stack
  # object to its team reads as a race. One kernel thread: the races between
  # openmtia's threads (host, stream workers, autograd, c10d) stay visible.
  export OMP_NUM_THREADS=1
  # die_after_fork=0: the fork tests start threads in the child (TSan would kill it:
  # "starting new threads after multi-threaded fork is not supported")
  export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=0:report_signal_unsafe=0:die_after_fork=0:suppressions=$sup/tsan.supp"
fi

echo "== runtime GoogleTests ($kind)"
"$B"/runtime/openmtia_engine_tests --gtest_brief=1
"$B"/runtime/openmtia_client_tests --gtest_brief=1
for driver in emulated reference; do
  "$B"/runtime/openmtia_driver_conformance "$B"/runtime/libopenmtia_driver_$driver.so --gtest_brief=1
done

echo "== pytest ($kind)"
# ASLR off: TSan needs its fixed memory layout on kernels with high mmap entropy
status=0
# PYTHONSAFEPATH: no python (nor a test's child python) puts the current
# directory first on sys.path, where the unsanitized package is
PYTHONPATH="$B/pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 LD_PRELOAD="$preload" \
  setarch "$(uname -m)" -R timeout -k 30 "${OPENMTIA_SANITIZE_TIMEOUT:-5400}" \
  "$PY" -m pytest -q -p timeout --timeout=1800 --timeout-method=thread "${@:-tests}" || status=$?
n=$(cat "$logs"/* 2>/dev/null | grep -cE "^(==[0-9]+==ERROR|WARNING: ThreadSanitizer|.*runtime error:)" || true)
echo "sanitize.sh $kind: pytest exit status $status, $n sanitizer reports (in $logs)"
[ "$n" -eq 0 ] || { head -c 20000 "$logs"/* >&2; exit 1; }
exit $status
