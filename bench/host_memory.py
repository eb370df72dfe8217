"""Host memory (RSS) growth of mtia against CPU PyTorch, per workload.

Each workload runs in a fresh process (`--run NAME --device D` is that
process): RSS is read from /proc/self/status after gc.collect() and a device
synchronize, before and after the workload; the difference is its growth.
Without arguments it runs every workload on both devices and prints a table
(and, with --png, draws it). tests/test_host_memory.py holds mtia to CPU's
growth times 2 plus 64 MiB.

Workloads (the first three are issue 22's, the last two its training loop
with a learning-rate schedule and issue 18's new-shapes loop):
- rows: 1,000 ops (acos, cumsum, + 1, special.i0e, sort) on rows of an 8 MiB
  float32 tensor, results kept;
- transformer: nn.TransformerEncoderLayer(256, 4, 1024) over 200 never-seen
  sequence lengths, a clone of the last position kept (as generation does);
- complex_rows / complex_rows_1024: torch.stack([f(row) for row in x]) for
  torch._refs.acos, torch._refs.sin and torch.acosh over the rows of a
  512 x 1024 (4 MiB) / 1024 x 1024 (8 MiB) complex64 tensor;
- lr_schedule: an MLP trained with AdamW under a cosine learning-rate schedule
  (a new Python float each step);
- new_shapes: matmul + gelu over 300 shapes never seen before.
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

import torch


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def rows(device):
    x = torch.randn(2048, 1024, device=device)  # 8 MiB
    ops = [torch.acos, lambda r: torch.cumsum(r, 0), lambda r: r + 1, torch.special.i0e,
           lambda r: torch.sort(r).values]

    def run():
        return [ops[i % len(ops)](x[i]) for i in range(1000)]
    return run


def transformer(device):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).to(device).eval()

    def run():
        kept = []
        with torch.no_grad():
            for n in range(1, 201):
                y = layer(torch.randn(1, n, 256, device=device))
                kept.append(y[:, -1].clone())
        return kept
    return run


def complex_rows(device, n=512):
    x = torch.randn(n, 1024, dtype=torch.complex64, device=device)
    fns = [torch._refs.acos, torch._refs.sin, torch.acosh]

    def run():
        return [torch.stack([f(row) for row in x]) for f in fns]
    return run


def lr_schedule(device, steps=300):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=1e-5)
    x, t = torch.randn(32, 64, device=device), torch.randint(0, 10, (32,), device=device)

    def run():
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(x), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        return loss.detach()
    return run


def new_shapes(device):
    def run():
        out = []
        for i in range(300):
            a = torch.randn(16 + i, 64, device=device)
            b = torch.randn(64, 32 + i % 7, device=device)
            out.append(torch.nn.functional.gelu(a @ b).sum())
        return out
    return run


WORKLOADS = {
    "rows": rows,
    "transformer": transformer,
    "complex_rows": complex_rows,
    "complex_rows_1024": lambda device: complex_rows(device, 1024),
    "lr_schedule": lr_schedule,
    "new_shapes": new_shapes,
}


def sync(device):
    if device == "mtia":
        torch.mtia.synchronize()


def measure(name, device):
    """This process: the workload's RSS growth in MiB."""
    run = WORKLOADS[name](device)
    sync(device)
    gc.collect()
    before = rss_mib()
    kept = run()
    sync(device)
    gc.collect()
    time.sleep(0.05)  # (an idle mtia worker returns its free heap memory after 5 ms)
    after = rss_mib()
    del kept
    return after - before


def in_subprocess(name, device, timeout=300):
    """A fresh process's RSS growth for the workload, in MiB."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", name, "--device", device],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{name} on {device} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["growth_mib"]


def bound(cpu_growth):
    """The growth mtia may have: twice CPU's plus 64 MiB."""
    return 2 * max(cpu_growth, 0.0) + 64


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", choices=sorted(WORKLOADS), help="(internal) run one workload in this process")
    p.add_argument("--device", default="mtia")
    p.add_argument("--png", help="draw the table into this PNG")
    args = p.parse_args()
    if args.run:
        print(json.dumps({"growth_mib": measure(args.run, args.device)}))
        return
    rows_ = []
    print(f"{'workload':<20} {'CPU MiB':>9} {'mtia MiB':>9} {'bound':>9}  ok")
    for name in WORKLOADS:
        cpu, mtia = in_subprocess(name, "cpu"), in_subprocess(name, "mtia")
        rows_.append((name, cpu, mtia))
        print(f"{name:<20} {cpu:9.1f} {mtia:9.1f} {bound(cpu):9.1f}  {'yes' if mtia <= bound(cpu) else 'NO'}",
              flush=True)
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.5))
        xs = range(len(rows_))
        ax.bar([x - 0.2 for x in xs], [r[1] for r in rows_], 0.4, label="CPU")
        ax.bar([x + 0.2 for x in xs], [r[2] for r in rows_], 0.4, label="mtia")
        ax.set_xticks(list(xs), [r[0] for r in rows_], rotation=20)
        ax.set_ylabel("host RSS growth (MiB)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png)


if __name__ == "__main__":
    main()
