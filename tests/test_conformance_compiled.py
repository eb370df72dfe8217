"""conformance/ in compiled mode (issue 10): OpInfo samples through
torch.compile on mtia against eager CPU, forward and backward, float32 and
bfloat16, on a slice of ops that covers Inductor's kinds of kernels (pointwise,
reductions, normalizations, extern matmuls and convolutions, views and
concatenation, indexing, scans). The full run is `python conformance/run.py
--compiled` (docs/conformance.md); both fail on a failure not listed in
conformance/known_failures_compiled.json, or a listed one that now passes.
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLICE = ["add", "mul", "div", "sin", "exp", "sigmoid", "clamp", "where", "sum", "mean", "amax", "softmax",
         "log_softmax", "nn.functional.layer_norm", "var_mean", "mm", "addmm", "bmm", "nn.functional.conv2d",
         "nn.functional.gelu", "cat", "index_select", "gather", "cumsum", "transpose"]


def test_compiled_conformance_slice(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "conformance" / "run.py"), "--compiled", "--ops", ",".join(SLICE),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=1800)
    print(r.stdout[-5000:])
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results) >= len(SLICE)
    assert not any(x.get("crash") or x.get("internal_error") for x in results)
    executed = passed = 0
    for x in results:
        for per_dtype in x["checks"].values():
            for entry in per_dtype.values():
                c = entry["counts"]
                passed += c.get("pass", 0)
                executed += sum(v for k, v in c.items() if k not in ("skipped", "cpu_compile_fails"))
    assert executed >= 4 * len(SLICE) and passed == executed
