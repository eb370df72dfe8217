"""The main job: train a small classifier on mtia and check it matches CPU.

The data set (a noisy 4-class spiral) is generated here from a fixed seed; the
model, the initial weights and the batches are identical for both runs, so the
per-step losses on mtia must equal the CPU run's (to 1e-5).

Under torchrun (`torchrun --nproc-per-node 2 examples/train.py`) each rank
trains on its own mtia device with DistributedDataParallel over the openmtia
c10d backend, on its share of every batch; rank 0 then checks the averaged
losses against one CPU process training on the whole batches.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist


def make_spirals(n_per_class=256, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for c in range(classes):
        r = torch.linspace(0.05, 1.0, n_per_class)
        theta = c * 2 * math.pi / classes + r * 4 + torch.randn(n_per_class, generator=g) * 0.15
        xs.append(torch.stack([r * torch.cos(theta), r * torch.sin(theta)], 1))
        ys.append(torch.full((n_per_class,), c))
    x, y = torch.cat(xs), torch.cat(ys)
    perm = torch.randperm(len(x), generator=g)
    return x[perm], y[perm]


def progress(epoch, epochs, step, steps, loss, width=24):
    done = int(width * step / steps)
    bar = "#" * done + "-" * (width - done)
    sys.stdout.write(f"\r  epoch {epoch + 1}/{epochs} [{bar}] {step}/{steps} loss {loss:.6f}")
    sys.stdout.flush()


def train(device, epochs, batch_size, seed=0, verbose=True, distributed=False):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(2, 64), torch.nn.GELU(),
        torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
        torch.nn.Linear(64, 4),
    ).to(device)
    net = model
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    if distributed:
        # gradients averaged across ranks by the openmtia backend, in buckets
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    verbose = verbose and rank == 0
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=1e-2)
    x, y = make_spirals(seed=seed)
    # the whole data set lives on the device; batches are views of it
    x, y = x.to(device), y.to(device)
    steps = len(x) // batch_size
    losses = []
    for epoch in range(epochs):
        epoch_loss = 0.0
        for step in range(steps):
            xb = x[step * batch_size:(step + 1) * batch_size].chunk(world)[rank]
            yb = y[step * batch_size:(step + 1) * batch_size].chunk(world)[rank]
            loss = torch.nn.functional.cross_entropy(net(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if distributed:  # the whole batch's loss: the mean of the ranks' (equal) shares
                loss = loss.detach().clone()
                dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            value = loss.item()
            losses.append(value)
            epoch_loss += value
            if verbose:
                progress(epoch, epochs, step + 1, steps, value)
        if verbose:
            sys.stdout.write(f"\r  epoch {epoch + 1}/{epochs} mean loss {epoch_loss / steps:.6f}" + " " * 40 + "\n")
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    return losses, accuracy


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--tolerance", type=float, default=1e-5)
    args = p.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return main_ddp(args)

    print(f"torch {torch.__version__}; mtia available: {torch.mtia.is_available()}, "
          f"devices: {torch.mtia.device_count()} ({torch.mtia.get_device_properties(0)['name']})")
    # PyTorch's own one-time start-up (lazy imports, first optimizer step) costs
    # about a second on whichever run comes first: an untimed CPU epoch takes it
    train("cpu", 1, args.batch_size, verbose=False)
    print("training on mtia")
    t0 = time.perf_counter()
    mtia_losses, mtia_acc = train("mtia", args.epochs, args.batch_size)
    t_mtia = time.perf_counter() - t0
    print("training on cpu (reference)")
    t0 = time.perf_counter()
    cpu_losses, cpu_acc = train("cpu", args.epochs, args.batch_size)
    t_cpu = time.perf_counter() - t0

    worst = max(abs(a - b) for a, b in zip(mtia_losses, cpu_losses))
    print(f"{len(mtia_losses)} steps; final loss mtia {mtia_losses[-1]:.6f} cpu {cpu_losses[-1]:.6f}; "
          f"accuracy mtia {mtia_acc:.3f} cpu {cpu_acc:.3f}")
    print(f"largest per-step loss difference: {worst:.2e} (tolerance {args.tolerance:g}); "
          f"time mtia {t_mtia:.2f}s (incl. planning each op signature's first call) cpu {t_cpu:.2f}s")
    if len(mtia_losses) != len(cpu_losses) or worst > args.tolerance:
        print("FAIL: mtia and cpu runs differ")
        return 1
    print("OK: mtia matches cpu")
    return 0


def main_ddp(args):
    """Under torchrun: DDP on one mtia device per rank, checked against CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(device_id=torch.device("mtia", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"DDP on mtia: {world} ranks, backend {dist.get_backend()} "
              f"({dist.get_backend_config()}); each rank takes 1/{world} of every batch")
    t0 = time.perf_counter()
    mtia_losses, mtia_acc = train(torch.device("mtia", local_rank), args.epochs, args.batch_size, distributed=True)
    t_mtia = time.perf_counter() - t0
    dist.destroy_process_group()
    if rank != 0:
        return 0
    print("training on cpu, one process, whole batches (reference)")
    cpu_losses, cpu_acc = train("cpu", args.epochs, args.batch_size, verbose=False)
    worst = max(abs(a - b) for a, b in zip(mtia_losses, cpu_losses))
    print(f"{len(mtia_losses)} steps; final loss DDP mtia {mtia_losses[-1]:.6f} cpu {cpu_losses[-1]:.6f}; "
          f"accuracy DDP mtia {mtia_acc:.3f} cpu {cpu_acc:.3f}; DDP time {t_mtia:.2f}s")
    print(f"largest per-step loss difference: {worst:.2e} (tolerance {args.tolerance:g})")
    if worst > args.tolerance:
        print("FAIL: DDP on mtia and one CPU process differ")
        return 1
    print("OK: DDP on mtia matches one cpu process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
