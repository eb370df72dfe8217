"""torch.distributed on mtia, measured in one run: prints a table.

Two ranks (processes, one mtia device each) on loopback, one process group
with the openmtia backend for mtia tensors and Gloo for CPU tensors
(``backend="mtia:openmtia,cpu:gloo"``):

- all_reduce bus bandwidth (size x 2(n-1)/n / time) for 1 MB and 64 MB, mtia
  tensors vs CPU tensors of the same size, the two alternating; median of the
  repeats. Target (issue 11): mtia at least 0.9x Gloo on CPU;
- the DDP train step of a small transformer (2 layers, width 256, SGD) with 2
  processes on halves of the batch, next to 1 process on the whole batch
  (reported).
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transformer():
    return torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True), num_layers=2,
        enable_nested_tensor=False)


def ddp_step_time(device, batch, steps, ddp):
    torch.manual_seed(0)
    model = transformer().to(device)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 128, 256, device=device)
    times = []
    for i in range(steps + 3):
        torch.mtia.synchronize()
        t0 = time.perf_counter()
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.mtia.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rank_main(rank, world, port, sizes, repeats, steps, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("mtia", rank)
    torch.mtia.set_device(dev)
    dist.init_process_group("mtia:openmtia,cpu:gloo", rank=rank, world_size=world, device_id=dev)
    rows = []
    for size in sizes:
        n = size // 4
        tensors = {"mtia": torch.ones(n, device=dev), "cpu": torch.ones(n)}
        inner = max(2, min(50, (64 << 20) // size // 4))
        times = {k: [] for k in tensors}
        for rep in range(repeats + 1):
            for kind, t in tensors.items():
                dist.barrier()
                torch.mtia.synchronize()
                t0 = time.perf_counter()
                for _ in range(inner):
                    dist.all_reduce(t)
                if kind == "mtia":
                    torch.mtia.synchronize()
                if rep:
                    times[kind].append((time.perf_counter() - t0) / inner)
        bus = {k: size * 2 * (world - 1) / world / statistics.median(v) / 1e9 for k, v in times.items()}
        rows.append((size, bus["cpu"], bus["mtia"]))
    t_ddp = ddp_step_time(dev, 8 // world, steps, ddp=True)
    dist.destroy_process_group()
    if rank == 0:
        out.put((rows, t_ddp))


def one_process_step(steps, out):
    out.put(ddp_step_time(torch.device("mtia", 0), 8, steps, ddp=False))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(rank_main, args=(2, free_port(), [1 << 20, 64 << 20], args.repeats, args.steps, q), nprocs=2)
    rows, t_ddp = q.get()
    proc = ctx.Process(target=one_process_step, args=(args.steps, q))
    proc.start()
    proc.join()
    t_one = q.get()

    print(f"torch {torch.__version__}; 2 ranks on loopback, {os.cpu_count()} cores; median of {args.repeats} runs\n")
    print("| all_reduce, 2 ranks | gloo on cpu tensors | openmtia on mtia tensors | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for size, cpu, mtia in rows:
        ratio = mtia / cpu
        print(f"| {size >> 20} MB | {cpu:.2f} GB/s | {mtia:.2f} GB/s | {ratio:.2f} | >= 0.9 | "
              f"{'yes' if ratio >= 0.9 else 'NO'} |")
    print("\n| transformer 2x256 train step (SGD), batch 8 x 128 tokens | time |")
    print("|---|---|")
    print(f"| 1 process, whole batch, mtia:0 | {t_one * 1e3:.1f} ms |")
    print(f"| DDP, 2 processes x half batch, mtia:0 + mtia:1 | {t_ddp * 1e3:.1f} ms ({t_one / t_ddp:.2f}x) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
