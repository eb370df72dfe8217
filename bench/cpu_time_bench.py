"""CPU time a step (issue 56): what the emulated device costs the host's cores,
against CPU PyTorch in the same run.

On a host whose cores are all busy (several ranks, or a host thread that
never waits) throughput follows CPU time, so each row gives both, as ratios
mtia / CPU:
- CPU time a step: all threads of the process, summed over the ranks
  (getrusage in each rank, around the timed steps); target <= 1.15;
- throughput (steps/s of the timed steps); target >= 1.0 in one process,
  >= 0.9 on 2 ranks.

Rows: a model of small kernels (an MLP of 6 layers 64 wide, batch 32, AdamW
with foreach, mtia's default) in one process and under DDP on 2 ranks (2
processes on this host's cores); bench.py's 10-op chain of 64 elements; the
AdamW step over the GPT's parameters (with its launches a step; target <= 10
and a step no slower than CPU's). The DLRM rows are bench/recsys_bench.py's.

Every run is a process of its own: CPU PyTorch's as its users have it
(TORCH_DEVICE_BACKEND_AUTOLOAD=0: no openmtia in the process), mtia's with
openmtia; the two alternate, --repeats times, and the table shows medians.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return r.ru_utime + r.ru_stime


def sync(device):
    if device.type == "mtia":
        import torch
        torch.mtia.synchronize()


def mlp_case(device, steps, ddp):
    import torch
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=device)
    y = torch.randn(32, 64, device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # (the loop reads its loss, as a training loop logs it)
    return step, {}


def chain_case(device, steps, ddp):
    import torch
    a = torch.randn(64, device=device)

    def step():
        t = a
        for _ in range(5):  # 10 ops
            t = t * 1.0001 + 0.5
        sync(device)
    return step, {}


def adamw_case(device, steps, ddp):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from gpt import GPT
    torch.manual_seed(0)
    params = list(GPT().to(device).parameters())
    g = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    opt = torch.optim.AdamW(params, lr=1e-3)
    extra = {}

    def step():
        opt.step()
        sync(device)
    return step, extra


CASES = {"mlp": mlp_case, "chain": chain_case, "adamw": adamw_case}


def serve(case, device_name, steps, warmup):
    """One run (one rank): writes {"steps_per_s", "cpu_s", "launches"} to a file."""
    import torch
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ddp = world > 1
    device = torch.device(device_name, rank if device_name == "mtia" else None) if device_name == "mtia" \
        else torch.device("cpu")
    if device.type == "mtia":
        torch.mtia.set_device(device)
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo" if device.type == "cpu" else None, device_id=device if device.type == "mtia"
                                else None)
    step, _ = CASES[case](device, steps, ddp)
    for _ in range(warmup):
        step()
    sync(device)
    launches = None
    if device.type == "mtia":
        import openmtia
        launches0 = openmtia._C._host_launches()
    c0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    t1, c1 = time.perf_counter(), cpu_seconds()
    if device.type == "mtia":
        launches = (openmtia._C._host_launches() - launches0) / steps
    # (a file per rank: two ranks' lines on torchrun's one stdout may interleave)
    with open(os.path.join(os.environ["CPU_TIME_BENCH_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "steps_per_s": steps / (t1 - t0), "cpu_s": c1 - c0, "launches": launches}, f)
    if ddp:
        import gc
        import torch.distributed as dist
        del step  # (DDP's reducer before its group: CPU PyTorch's gloo ranks aborted at exit otherwise, now and then)
        gc.collect()
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(case, device, ranks, steps, warmup):
    """(steps/s, CPU ms a step summed over the ranks, launches a step) of one run."""
    env = dict(os.environ)
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU PyTorch as its users have it
    me = [os.path.abspath(__file__), "--serve", case, device, "--steps", str(steps), "--warmup", str(warmup)]
    if ranks == 1:
        cmd = [sys.executable] + me
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               f"--master-port={free_port()}", "--master-addr=127.0.0.1"] + me
    with tempfile.TemporaryDirectory(prefix="cpu-time-bench-") as d:
        env["CPU_TIME_BENCH_OUT"] = d
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        results = [json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d))]
    if out.returncode != 0 or len(results) != ranks:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    rate = min(r["steps_per_s"] for r in results)
    cpu_ms = sum(r["cpu_s"] for r in results) / steps * 1e3
    return rate, cpu_ms, results[0]["launches"]


ROWS = [  # name, case, ranks, steps, warmup
    ("MLP 6x64, batch 32, AdamW, 1 process", "mlp", 1, 400, 30),
    ("MLP 6x64, batch 32, AdamW, DDP on 2 ranks", "mlp", 2, 400, 30),
    ("10-op chain of 64 elements, synchronized", "chain", 1, 3000, 100),
    ("AdamW step over the GPT's parameters", "adamw", 1, 100, 10),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one run each, fewer steps (a smoke run)")
    p.add_argument("--serve", nargs=2, metavar=("CASE", "DEVICE"), help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve(args.serve[0], args.serve[1], args.steps, args.warmup)
    repeats = 1 if args.quick else args.repeats
    flags = sorted(set(open("/proc/cpuinfo").read().split()) & {"avx512_bf16", "amx_bf16", "avx512bw", "avx2"})
    print(f"CPU time a step, mtia / CPU PyTorch (medians of {repeats}); host: {os.cpu_count()} cores, "
          f"{' '.join(flags)}")
    print("| row | CPU steps/s | mtia steps/s | throughput | target | CPU CPU-ms | mtia CPU-ms | CPU time | target "
          "| mtia launches |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, case, ranks, steps, warmup in ROWS:
        if args.quick:
            steps, warmup = max(10, steps // 10), max(3, warmup // 3)
        got = {"cpu": [], "mtia": []}
        for _ in range(repeats):
            for device in ("cpu", "mtia"):
                got[device].append(run(case, device, ranks, steps, warmup))
        med = {d: [statistics.median(r[i] for r in got[d]) for i in range(2)] for d in got}
        launches = statistics.median(r[2] for r in got["mtia"])
        rate = med["mtia"][0] / med["cpu"][0]
        cpu = med["mtia"][1] / med["cpu"][1]
        rate_target = 1.0 if ranks == 1 else 0.9
        print(f"| {name} | {med['cpu'][0]:,.0f} | {med['mtia'][0]:,.0f} | {rate:.2f} | >= {rate_target} "
              f"| {med['cpu'][1]:.3f} | {med['mtia'][1]:.3f} | {cpu:.2f} | <= 1.15 | {launches:.1f} |", flush=True)


if __name__ == "__main__":
    main()
