"""bench/bench.py runs (a smoke run: one repeat, quick) and prints every row:
its figures are measured on an idle machine by hand, but a broken bench
(an API it calls changed) is a test failure."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench.py"


def test_cpu_and_low_precision_tables_run(tmp_path):
    png = tmp_path / "bench.png"
    r = subprocess.run([sys.executable, str(BENCH), "--tables", "cpu,low-precision", "--quick", "--repeats", "1",
                        "--png", str(png)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and not l.startswith("| case")]
    low = [l for l in rows if "float16" in l or "bfloat16" in l]
    assert len(low) == 2 * 13, low  # thirteen cases, bf16 and fp16 each
    assert any("gelu backward" in l for l in low) and any("silu" in l for l in low)
    assert any("layer_norm" in l for l in low)
    assert any("x > y" in l for l in low) and any("mean" in l for l in low)
    assert len(rows) > len(low)  # and the mtia-vs-CPU rows
    assert any("table-batched lookup" in l for l in rows)
    assert png.stat().st_size > 0


def test_deploy_bench_runs():
    deploy = BENCH.parent / "deploy_bench.py"
    r = subprocess.run([sys.executable, str(deploy), "--quick"], capture_output=True, text=True, timeout=900,
                       cwd=str(BENCH.parent))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [l for l in r.stdout.splitlines() if l.startswith("transformer block")]
    assert [l.split()[2] for l in rows] == ["eager", "compile", "aoti"], r.stdout
    assert "target: AOTInductor on mtia within 1.1x" in r.stdout


def test_recsys_bench_runs():
    r = subprocess.run([sys.executable, str(BENCH.parent / "recsys_bench.py"), "--quick"], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    rows = [l for l in r.stdout.splitlines() if l.startswith("| DLRM train step")]
    assert [l.split("|")[1].strip() for l in rows] == [
        "DLRM train step, 1 process", "DLRM train step, 1 process, table-wise on both",
        "DLRM train step, 2 ranks, tables sharded",
        "DLRM train step, 2 ranks, table-wise on both"], r.stdout
    for l in rows:  # samples/s, then CPU ms a step, of each device
        cells = [c.strip() for c in l.split("|")]
        assert all(float(c.replace(",", "")) > 0 for c in cells[2:4] + cells[6:8]), l
    assert "target: DLRM train-step throughput on mtia >= 1.0x CPU's" in r.stdout


def test_cpu_time_bench_runs():
    r = subprocess.run([sys.executable, str(BENCH.parent / "cpu_time_bench.py"), "--quick"], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    rows = [[c.strip() for c in l.split("|")[1:-1]] for l in r.stdout.splitlines() if l.startswith("| ")][1:]
    assert [row[0] for row in rows] == [
        "MLP 6x64, batch 32, AdamW, 1 process", "MLP 6x64, batch 32, AdamW, DDP on 2 ranks",
        "10-op chain of 64 elements, synchronized", "AdamW step over the GPT's parameters"], r.stdout
    for row in rows:  # steps/s and CPU ms of each device, then mtia's launches a step
        assert all(float(row[i].replace(",", "")) > 0 for i in (1, 2, 5, 6)), row
    assert float(rows[2][9]) == 10.0, rows[2]  # the chain: one launch an op
    assert float(rows[3][9]) <= 10.0, rows[3]  # AdamW with foreach: a launch a list op, not a tensor


def test_profiler_bench_runs():
    r = subprocess.run([sys.executable, str(BENCH.parent / "profiler_bench.py"), "--quick"], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    rows = [[c.strip() for c in l.split("|")[1:-1]] for l in r.stdout.splitlines() if l.startswith("| ")][1:]
    assert [row[0] for row in rows] == ["cpu", "mtia", "mtia's overhead / CPU's (target <= 1.0)"], r.stdout
    for row in rows[:2]:  # step ms and CPU ms, unprofiled and profiled, and their ratios
        assert all(float(row[i]) > 0 for i in range(1, 7)), row
    assert float(rows[2][3]) > 0 and float(rows[2][6]) > 0, rows[2]
