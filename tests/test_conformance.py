"""conformance/ (PyTorch's OpInfo database on mtia vs CPU): every op of
op_db in 12 dtypes and every check (forward, backward, out=,
non-contiguous), on up to 6 samples per op, check and dtype, and on every
sample of the ops with known failures (so that a fixed one is noticed). With
OPENMTIA_LOOP_MIN_ELEMENTS=0: every bf16/fp16 sample the vector loops take
runs through them (csrc/aten/low_precision/kernels.h; OpInfo's samples are all
below their default 32768 elements, which keep CPU's kernels bit for bit, as
the other dtypes' samples show the fallback's path).

The full run (every sample: `python conformance/run.py`, docs/conformance.md)
takes 337 s on 2 cores against 105 s for this one; at 6 samples the test
command fits CI's 45 minutes (it took 48 with the full run).

Fails on any failure not listed in conformance/known_failures.json, on a listed
one that now passes, on a crashed op, and below the targets (float32: 98% of
executed forward samples, 95% of backward samples).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_conformance_of_every_op_on_six_samples(tmp_path):
    env = dict(os.environ, OPENMTIA_LOOP_MIN_ELEMENTS="0")
    r = subprocess.run([sys.executable, str(ROOT / "conformance" / "run.py"), "--max-samples", "6", "--out",
                        str(tmp_path)],
                       capture_output=True, text=True, timeout=560, env=env)
    print(r.stdout[-5000:])
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results) > 600  # every op of op_db ran
    assert not any(x.get("crash") or x.get("internal_error") for x in results)

    def rate(check, dtype):
        passed = executed = 0
        for x in results:
            c = x["checks"].get(check, {}).get(dtype, {}).get("counts", {})
            passed += c.get("pass", 0)
            executed += sum(v for k, v in c.items() if k != "skipped")
        return passed / executed

    assert rate("forward", "float32") >= 0.98
    assert rate("backward", "float32") >= 0.95
    for dtype in ("complex64", "int32", "uint8", "bfloat16"):
        assert rate("forward", dtype) >= 0.98, dtype
