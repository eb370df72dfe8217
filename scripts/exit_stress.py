"""Exit stress: processes that use mtia and then exit, normally or in the
middle of device work, must all exit with status 0 (no "terminate called ...",
no SIGABRT, no hang).

    python scripts/exit_stress.py                 # 200 training + 20 of each interrupted kind
    python scripts/exit_stress.py --train 10 --interrupted 2   # CI's short version

Kinds:
  train     forward, backward and an optimizer step on mtia, a sync, a normal exit
  queued    exits (falls off the end of the script) with many device tasks queued
  compiled  exits right after a torch.compile'd call, its kernels still queued
  ddp       two ranks exit right after a DDP backward, its all_reduce in flight
  raising   exits by an uncaught exception with device work queued
Each process runs with a time bound; the script prints counts per kind and
exits non-zero if any process failed.
"""
import argparse
import collections
import os
import socket
import subprocess
import sys
import textwrap
import time

TRAIN = """
import torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("mtia")
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x, y = torch.randn(16, 32, device="mtia"), torch.randint(0, 4, (16,), device="mtia")
for _ in range(5):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
assert torch.isfinite(m[0].weight).all().item()
"""

QUEUED = """
import torch
a = torch.randn(256, 256, device="mtia")
for _ in range(300):
    a = torch.tanh(a @ a) + 1
m = torch.nn.Linear(256, 256).to("mtia")
m(a).sum().backward()   # the autograd engine's device thread has run; its work is queued
"""

COMPILED = """
import torch
@torch.compile
def f(x, y):
    return torch.relu(x @ y).sin() + y.sum()
x = torch.randn(64, 64, device="mtia")
f(x, x).sum().item()
for _ in range(50):
    x = f(x, x)
"""

RAISING = """
import torch
a = torch.randn(512, 512, device="mtia")
for _ in range(100):
    a = a @ a
raise SystemExit(0) if a.numel() == 0 else KeyError("expected: exits by an exception with work queued")
"""

DDP = """
import datetime, os, sys, torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
rank = int(sys.argv[1])
dist.init_process_group(rank=rank, world_size=2, device_id=torch.device("mtia", rank),
                        timeout=datetime.timedelta(seconds=30))
m = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(f"mtia:{rank}"))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(32, 64, device=f"mtia:{rank}")
m(x).sum().backward(); opt.step(); torch.mtia.synchronize()
m(x).sum().backward()   # exits with this step's all_reduce in flight
"""

KINDS = {"train": TRAIN, "queued": QUEUED, "compiled": COMPILED, "raising": RAISING, "ddp": DDP}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(code, args=(), env=None):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return "hang", err
    return p.returncode, err


def expected_status(kind):
    return 1 if kind == "raising" else 0


def run_one(kind, timeout):
    """Returns a list of (ok, description) for the processes of one run."""
    code = KINDS[kind]
    if kind == "ddp":
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OPENMTIA_DEVICE_COUNT="2")
        procs = [launch(code, [str(r)], env) for r in range(2)]
    else:
        procs = [launch(code)]
    results = []
    for p in procs:
        status, err = finish(p, timeout)
        ok = status == expected_status(kind) and "terminate called" not in err and "Abort" not in err
        if kind == "raising":
            ok = ok and "KeyError: 'expected: exits by an exception" in err
        results.append((ok, f"{kind}: status {status}\n{err[-2000:]}"))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=int, default=200, help="training processes that exit normally")
    ap.add_argument("--interrupted", type=int, default=20, help="processes of each interrupted kind")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a process may take")
    args = ap.parse_args(argv)
    plan = ["train"] * args.train
    for kind in ("queued", "compiled", "ddp", "raising"):
        plan += [kind] * args.interrupted
    counts = collections.Counter()
    failures = []
    t0 = time.time()
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(args.jobs) as pool:
        for kind, results in zip(plan, pool.map(lambda k: run_one(k, args.timeout), plan)):
            for ok, desc in results:
                counts[(kind, ok)] += 1
                if not ok:
                    failures.append(desc)
                    print("FAILED", desc, file=sys.stderr, flush=True)
    kinds = sorted({k for k, _ in counts})
    for k in kinds:
        print(f"{k:9s} processes {counts[(k, True)] + counts[(k, False)]:4d}  failed {counts[(k, False)]}")
    print(f"exit stress: {sum(counts.values())} processes, {len(failures)} failed, {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
