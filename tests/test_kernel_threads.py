"""The device's kernel threads (csrc/aten/threads.cpp): the host thread keeps no
OpenMP team of its own after a CPU kernel it runs itself (a synchronous
call), and an idle stream worker keeps none either. A team left beside the
workers' makes libgomp put every device kernel's threads to sleep between
parallel regions (one wake-up per region); a team left spinning by an idle
worker took the core a woken host thread needed until the next scheduler
tick. Each check runs in a fresh process with two OpenMP threads, so a team
exists wherever a kernel makes one, on any host."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

HELPERS = """
import os, sys, time, torch
def threads(prefix, named=True):
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            comm = open(f"/proc/self/task/{t}/comm").read()
        except FileNotFoundError:  # (ended meanwhile)
            continue
        n += comm.startswith(prefix) == named
    return n
"""


def run(body):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", HELPERS + textwrap.dedent(body)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


# A new signature's first call (randn's: every call) runs synchronously, on
# the host thread; over 4M elements its CPU kernel runs in parallel.
SYNC_CALL = """
dev = "{dev}"
start = threads("mtia", named=False)  # the host thread (and any helper of import's)
x = torch.randn(1 << 22, device=dev)
m = x > 0
idx = torch.nonzero(m)
after = threads("mtia", named=False)
assert torch.equal(idx.cpu(), torch.nonzero(m.cpu()))
print(start, after)
"""


def test_a_cpu_kernel_the_host_runs_leaves_no_openmp_team_on_the_host_thread():
    # on CPU the same call leaves a team beside the host thread (the check can fail)
    start, after = map(int, run(SYNC_CALL.format(dev="cpu")))
    assert after > start, (start, after)
    start, after = map(int, run(SYNC_CALL.format(dev="mtia")))
    assert after == start, (start, after)


@pytest.mark.needs_async
def test_an_idle_stream_worker_ends_its_openmp_team():
    busy, idle, same = run("""
    x = torch.randn(1 << 24, device="mtia")
    y = x + x  # (first call)
    torch.mtia.synchronize()
    for _ in range(40):
        y = x + x
    busy, deadline = 0, time.time() + 10
    while busy < 2 and not torch.mtia.current_stream().query() and time.time() < deadline:
        busy = max(busy, threads("mtia0s0"))  # the worker's team exists while the adds run ...
    torch.mtia.synchronize()
    deadline = time.time() + 10
    while threads("mtia0s0") > 1 and time.time() < deadline:  # ... and ends once the worker idles
        time.sleep(0.01)
    idle = threads("mtia0s0")
    # the next parallel kernel makes a new team and computes CPU's result
    x_cpu = x.cpu()
    same = torch.equal((x * 3 + 1).cpu(), x_cpu * 3 + 1)
    print(busy, idle, same)
    """)
    assert int(busy) == 2, busy  # the worker and its team's second thread
    assert int(idle) == 1, idle
    assert same == "True"


def test_a_small_synchronous_call_keeps_the_programs_thread_counts():
    # it runs on one thread (no team), then the host thread's settings are back
    threads_after, grown = run("""
    x = torch.arange(100, device="mtia")
    torch.nonzero(x % 3 == 0)
    n = torch.get_num_threads()
    start = threads("mtia", named=False)
    torch.randn(1 << 22).sum()  # the program's own CPU work gets its team
    print(n, threads("mtia", named=False) - start)
    """)
    assert threads_after == "2"
    assert grown == "1"


@pytest.mark.parametrize("op,shapes,parallel", [
    ("mm", [(64, 64), (64, 64)], False),            # 262K multiply-adds: 27 us on two threads, 9 on one
    ("mm", [(1024, 32), (32, 16)], False),          # a DLRM linear layer's (counted as elements x 16: parallel)
    ("mm", [(1024, 64), (64, 64)], True),           # 4.2M
    ("addmm", [(16,), (1024, 32), (32, 16)], False),
    ("addmm", [(256,), (256, 256), (256, 256)], True),
    ("bmm", [(1024, 5, 16), (1024, 16, 5)], False),  # 410K
    ("bmm", [(16, 128, 64), (16, 64, 128)], True),   # 16.8M
    ("baddbmm", [(16, 128, 128), (16, 128, 64), (16, 64, 128)], True),
])
def test_a_matrix_product_runs_on_every_thread_from_2m_multiply_adds(op, shapes, parallel):
    """A product of matrices is parallel by its multiply-adds (2M: where two
    threads start to pay on a 2-core VM), not by its elements: the small
    linear layers of a recommendation model run on one thread."""
    from openmtia import _C
    args = [torch.empty(s) for s in shapes]
    work = _C._kernel_work(f"aten::{op}", "", args)
    assert (work >= _C._parallel_work()) == parallel, (op, shapes, work)


# A task that sleeps, then sets its threads as a kernel over `work` does
# for 20 ms (_probe_kernel_threads: the fewest threads it got, the most host
# threads at work it saw), while the host thread waits for the device, keeps
# launching, or sleeps.
HOST_AT_WORK = """
from openmtia import _C
big = _C._parallel_work()
torch.ones(1, device="mtia").add_(1)
torch.mtia.synchronize()
p = _C._probe_kernel_threads(big, 0.05)
torch.mtia.synchronize()  # the host waits for the device while the kernel runs
waiting = (p.most_active_hosts, p.fewest_threads)
p = _C._probe_kernel_threads(big, 0.05)
x = torch.ones(1, device="mtia")
deadline = time.perf_counter() + 0.3
while time.perf_counter() < deadline:  # the host at work: a launch every 100 us
    x.add_(1)
    t = time.perf_counter() + 1e-4
    while time.perf_counter() < t:
        pass
torch.mtia.synchronize()
busy = (p.most_active_hosts, p.fewest_threads)
p = _C._probe_kernel_threads(big, 0.05)
time.sleep(0.2)  # the host launched, then sleeps (not waiting for the device)
torch.mtia.synchronize()
asleep = (p.most_active_hosts, p.fewest_threads)
p = _C._probe_kernel_threads(big - 1, 0.05)
torch.mtia.synchronize()
assert x.item() > 100
print(*waiting, *busy, *asleep, p.fewest_threads)
"""


@pytest.mark.needs_async
@pytest.mark.parametrize("policy", ["host", "all"])
def test_a_large_kernel_leaves_the_host_threads_at_work_their_cores(policy, monkeypatch):
    """The emulated device's kernels share the host's cores: a kernel on
    every thread while the host thread launches puts three runnable threads
    on two cores, and its parallel region's threads spin at its barriers for
    one that has no core (a DLRM train step ran 1.5-2x slower). So a large
    kernel uses the program's threads less the host threads at work: those
    that launched in the last 0.5 ms and are not waiting for the device.
    OPENMTIA_KERNEL_THREADS=all gives every large kernel every thread."""
    if policy == "all":
        monkeypatch.setenv("OPENMTIA_KERNEL_THREADS", "all")
    got = list(map(int, run(HOST_AT_WORK)))
    waiting, busy, asleep, small = got[0:2], got[2:4], got[4:6], got[6]
    assert waiting == [0, 2], got
    assert busy == [1, 1 if policy == "host" else 2], got
    assert asleep == [0, 2], got
    assert small == 1, got


def test_a_bad_kernel_threads_policy_is_an_error_at_import():
    env = dict(os.environ, OPENMTIA_KERNEL_THREADS="some")
    out = subprocess.run([sys.executable, "-c", "import torch, openmtia"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0
    assert "OPENMTIA_KERNEL_THREADS must be 'host'" in out.stderr, out.stderr[-2000:]
