"""Recommendation models, mtia vs CPU PyTorch (issue 42's point 7): the
DLRM train step of examples/dlrm.py in one process and on 2 ranks sharded
(torchrun), as samples/s; target >= 1.0x CPU's throughput. (The
table-batched lookup row is in bench/bench.py's table.) TorchRec's planner
gives mtia another plan than CPU (row-wise tables, as it gives CUDA, even on
one rank; CPU's planner does not offer row-wise): two more rows run both
devices on CPU's (table-wise). Each row also gives the CPU time a
step of rank 0's process, all threads: the host's, and on mtia the emulated
device's, which share the host's cores.

Each run is examples/dlrm.py itself in its own process (or torchrun's), on
one device; its figure is the median step time after 10 warm-up steps (the
step's full time: it ends with the loss read on the host). CPU and mtia runs
alternate, --repeats times each; the table shows the medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DLRM = os.path.join(HERE, "..", "examples", "dlrm.py")


def run(device, ranks, samples, sharding):
    """(samples/s, CPU ms a step of rank 0's process) of one run of the example."""
    png = os.path.join(tempfile.mkdtemp(prefix="recsys-bench-"), "dlrm.png")  # (not the example's own chart)
    cmd = [DLRM, "--device", device, "--samples", str(samples), "--held-out", "4096", "--min-auc", "0", "--png", png]
    if sharding:
        cmd += ["--sharding", sharding]
    if ranks > 1:
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [torchrun, "--standalone", "--nproc-per-node", str(ranks)] + cmd
    else:
        cmd = [sys.executable] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    m = re.search(rf"^  {device}: samples/s ([\d,]+) ", out.stdout, re.M)
    c = re.search(r"^  CPU time ([\d.]+) ms a step", out.stdout, re.M)
    if out.returncode != 0 or not m or not c:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return float(m.group(1).replace(",", "")), float(c.group(1))


# case, ranks, sharding types the planner may pick ("": any it offers for
# the device: it gives mtia row-wise tables, as it gives CUDA, even on one
# rank, and CPU's planner does not offer row-wise; the "table-wise on both"
# rows run both devices on the plan CPU's gets)
CASES = [
    ("1 process", 1, ""),
    ("1 process, table-wise on both", 1, "table_wise"),
    ("2 ranks, tables sharded", 2, ""),
    ("2 ranks, table-wise on both", 2, "table_wise"),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--samples", type=int, default=262_144)
    p.add_argument("--quick", action="store_true", help="one run each, fewer samples (a smoke run)")
    args = p.parse_args()
    repeats, samples = (1, 16_384) if args.quick else (args.repeats, args.samples)
    print(f"DLRM train step (examples/dlrm.py, global batch 1024, {samples:,} samples), samples/s, "
          f"median of {repeats} runs each; target: mtia >= 1.0x CPU. Last columns: the CPU time a step of "
          f"rank 0's process, all its threads ({os.cpu_count()} cores)\n")
    print(f"| {'case':40} | {'cpu':>10} | {'mtia':>10} | {'ratio':>6} | met | {'cpu CPU-ms':>10} | {'mtia CPU-ms':>11} |")
    print(f"|{'-' * 42}|{'-' * 12}|{'-' * 12}|{'-' * 8}|-----|{'-' * 12}|{'-' * 13}|")
    worst = None
    for name, ranks, sharding in CASES:
        runs = {"cpu": [], "mtia": []}
        for _ in range(repeats):
            for device in ("cpu", "mtia"):
                runs[device].append(run(device, ranks, samples, sharding))
        (cpu, cpu_ms), (mtia, mtia_ms) = (map(statistics.median, zip(*runs[d])) for d in ("cpu", "mtia"))
        ratio = mtia / cpu
        worst = ratio if worst is None else min(worst, ratio)
        print(f"| {'DLRM train step, ' + name:40} | {cpu:10,.0f} | {mtia:10,.0f} | {ratio:6.2f} | "
              f"{'yes' if ratio >= 1.0 else 'NO':3} | {cpu_ms:10.2f} | {mtia_ms:11.2f} |")
    print(f"\ntarget: DLRM train-step throughput on mtia >= 1.0x CPU's: worst {worst:.2f}x "
          f"({'met' if worst >= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
