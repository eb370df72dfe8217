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


@pytest.mark.needs_async
def test_a_worker_going_from_a_parallel_kernel_to_a_serial_one_ends_its_team():
    """After a parallel kernel, the next kernel on one thread ends the
    worker's OpenMP team, busy or not: libgomp spins an idle team's threads
    for up to ~15 ms here, on the cores the host thread and the worker's
    next kernels need (the worker of a DLRM train step spent ~40% of its
    time in the team's barrier loop). The next parallel kernel makes a new
    team and computes CPU's result."""
    during, after, small, same = run("""
    from openmtia import _C
    x = torch.randn(1 << 22, device="mtia")
    y = x + x  # (first call)
    torch.mtia.synchronize()
    y = x + x
    p0 = _C._probe_kernel_threads(_C._parallel_work(), 0.5)  # a parallel kernel's threads, held
    deadline = time.time() + 10
    while p0.threads < 0 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    during = threads("mtia0s0")  # its team
    p1 = _C._probe_kernel_threads(_C._parallel_work() - 1, 0.5)  # then one on one thread, held
    deadline = time.time() + 10
    while p1.threads < 0 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    after = threads("mtia0s0")  # the worker is busy (held): no idle hook ended the team
    torch.mtia.synchronize()
    same = torch.equal((x * 3 + 1).cpu(), x.cpu() * 3 + 1)
    print(during, after, p1.threads, same)
    """)
    assert int(during) == 2, during  # the worker and its team's second thread
    assert int(after) == 1, after
    assert small == "1"
    assert same == "True"
