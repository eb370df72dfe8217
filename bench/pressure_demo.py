"""The engine under pressure (issue 9's scenarios), in one run:

    python bench/pressure_demo.py

1. 200 matmuls (1024^2) issued without a sync: peak memory stays a few blocks
   (memory freed by the host is reused at once, in stream order).
2. A warm AdamW loop of 100 steps while the device is held busy: reserved
   memory and device allocations stay flat.
3. 10,000 training steps without a sync on a 256 MiB device.
4. 20,000 queued in-place ops: host memory stays flat and no device work is
   left when the loop returns (the launch queue is bounded).
"""
import os
import resource
import subprocess
import sys
import textwrap
import time

import torch

import openmtia

MiB = 1 << 20


def matmuls():
    a = torch.randn(1024, 1024, device="mtia")
    torch.mtia.synchronize()
    torch.mtia.reset_peak_memory_stats()
    base = torch.mtia.memory_allocated()
    for _ in range(200):
        b = a @ a
    peak = (torch.mtia.max_memory_allocated() - base) / MiB
    torch.mtia.synchronize()
    del b
    print(f"1. 200 matmuls, no sync: peak allocated above the input {peak:.1f} MiB")


def adamw_under_load():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to("mtia")
    opt = torch.optim.AdamW(model.parameters())
    data, target = torch.randn(32, 256, device="mtia"), torch.randint(0, 10, (32,), device="mtia")

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(data), target).backward()
            opt.step()
    steps(3)
    torch.mtia.synchronize()
    reserved, allocs = torch.accelerator.memory_reserved(), torch.mtia.memory_stats()["num_device_alloc"]
    busy = torch.randn(2048, 2048, device="mtia")
    for _ in range(8):
        busy = busy @ busy / 2048  # the device is busy for a while: the steps queue behind it
    steps(100)
    print(f"2. AdamW, 100 warm steps on a busy device: reserved {reserved / MiB:.1f} -> "
          f"{torch.accelerator.memory_reserved() / MiB:.1f} MiB, num_device_alloc {allocs} -> "
          f"{torch.mtia.memory_stats()['num_device_alloc']}")
    torch.mtia.synchronize()


# 10,000 SGD steps without a sync; prints the largest reserved memory (also
# run by tests/test_engine.py, on a 256M device)
NO_SYNC_TRAINING = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to("mtia")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(16, 64, device="mtia"), torch.randint(0, 10, (16,), device="mtia")
    for step in range(10000):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        opt.step()
    torch.mtia.synchronize()
    print(torch.accelerator.max_memory_reserved(), flush=True)
""")


def no_sync_on_a_small_device():
    code = NO_SYNC_TRAINING
    env = dict(os.environ, OPENMTIA_DEVICE_MEMORY="256M")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not r.stdout.split():
        print(f"3. 10,000 steps without a sync on a 256M device: FAILED\n{r.stdout}{r.stderr}")
        return
    print(f"3. 10,000 steps without a sync on a 256M device: completed, max reserved "
          f"{int(r.stdout.split()[-1]) / MiB:.1f} MiB")


def queued_ops():
    x = torch.zeros(256, device="mtia")
    for _ in range(3000):
        x.add_(1)
    torch.mtia.synchronize()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    for _ in range(20000):
        x.add_(1)
    t1 = time.perf_counter()
    torch.mtia.synchronize()
    t2 = time.perf_counter()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    print(f"4. 20,000 queued add_ (queue depth {os.environ.get('OPENMTIA_LAUNCH_QUEUE_DEPTH', 1024)}): loop "
          f"{t1 - t0:.2f} s, device work left after it {t2 - t1:.3f} s, max RSS +{grown:.1f} MB")


if __name__ == "__main__":
    matmuls()
    adamw_under_load()
    no_sync_on_a_small_device()
    queued_ops()
