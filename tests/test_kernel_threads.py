"""The device's kernel threads (csrc/aten/threads/kernel_threads.cpp): the host thread keeps no
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


def run(body, team_wait="adaptive", stderr=None, **env_vars):
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENMTIA_TEAM_WAIT=team_wait, **env_vars)
    out = subprocess.run([sys.executable, "-c", HELPERS + textwrap.dedent(body)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    if stderr is not None:
        stderr.append(out.stderr)
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
    """With spinning teams (OPENMTIA_TEAM_WAIT=spin, or while the host waits
    for the device), an idle worker's team ends."""
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
    """, team_wait="spin")  # (idle teams that sleep are kept: below)
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
    """, team_wait="spin")  # (idle teams that sleep are kept: below)
    assert int(during) == 2, during  # the worker and its team's second thread
    assert int(after) == 1, after
    assert small == "1"
    assert same == "True"


# How the device's idle OpenMP threads wait (csrc/aten/threads/team_wait.h): they
# sleep after a brief spin while host threads are mostly busy (they need the
# cores), and spin while they mostly wait for the device. Thread counts, and
# so results, never depend on it.
TEAM_WAIT = """
import threading
from openmtia import _C
def until(cond, timeout=10):
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        pass  # (busy: the host thread is not waiting for the device)
    return cond()
x = torch.randn(1 << 22, device="mtia")
x_cpu = x.cpu()
before = _C._team_wait_state()
y = x + x  # a kernel on every thread (its first call runs on the host) ...
y = x + x  # ... and on the worker
torch.mtia.synchronize()
until(lambda: _C._team_wait_state() != "off" or "{mode}" == "spin")
busy = _C._team_wait_state() if "{mode}" == "spin" else (until(lambda: _C._team_wait_state() == "sleep") and "sleep")
busy_threads = threads("mtia-teams")  # the control thread and its idle team's second thread
seen = []
def sample():
    time.sleep(0.3)  # while the host thread waits for the held stream
    seen.extend([_C._team_wait_state(), _C._host_threads_waiting(), threads("mtia-teams")])
probe = _C._probe_kernel_threads(0, 0.8)  # holds the stream 0.8 s
t = threading.Thread(target=sample)
t.start()
torch.mtia.synchronize()
t.join()
waiting_now = _C._host_threads_waiting()
small = torch.ones(8, device="mtia")
small = small + 1  # (its signature's first call, which may run on the host, before the pauses)
time.sleep(0.06)  # idle: the host neither launches nor waits
idle = _C._team_wait_state()
def switches():  # the control thread's voluntary context switches so far (-1: no control)
    for t in os.listdir("/proc/self/task"):
        try:
            if open(f"/proc/self/task/{{t}}/comm").read().strip() == "mtia-teams":
                status = open(f"/proc/self/task/{{t}}/status").read()
                return int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        except FileNotFoundError:
            pass
    return -1
time.sleep(0.3)  # idle for longer: the control stops polling
s0 = switches()
time.sleep(0.5)
idle_wakeups = switches() - s0 if s0 >= 0 else -1
def launching():  # the host busy, launching small kernels, not waiting for them
    global small
    t = time.perf_counter() + 1e-4
    while time.perf_counter() < t:  # (busy between launches: the device keeps up, the queue never fills)
        pass
    small = small + 1
    return _C._team_wait_state() == "sleep"
waited = _C._host_waited_ns()
after = "{mode}" == "spin" and _C._team_wait_state() or (until(launching) and "sleep")
after_waits = _C._host_waited_ns() - waited  # (the control heard of the launches, not of a wait)
same = torch.equal((x * 3 + 1).cpu(), x_cpu * 3 + 1) and torch.allclose(x.sum().cpu(), x_cpu.sum(), rtol=1e-5)
print(before, busy, busy_threads, *seen, waiting_now, idle, idle_wakeups, after, after_waits, same)
"""


@pytest.mark.needs_async
def test_device_teams_sleep_while_the_host_is_busy_and_spin_while_it_waits():
    out = run(TEAM_WAIT.format(mode="adaptive"))
    before, busy, busy_threads, waiting_state, waiting, waiting_threads, waiting_now, idle, idle_wakeups, after, \
        after_waits, same = out
    assert before == "off", out  # no control before a parallel kernel
    assert (busy, busy_threads) == ("sleep", "2"), out  # the control thread and its team's second thread
    # the host thread waited for 0.3 s: the control ended its team, the device's teams spin
    assert (waiting_state, waiting, waiting_threads) == ("spin", "1", "1"), out
    assert waiting_now == "0", out
    # a pause in which the host does not use the device leaves them as they were
    assert idle == "spin", out
    # and after a longer one the control waits for the next host wait (no polling)
    assert 0 <= int(idle_wakeups) <= 2, out
    # busy launching, without a wait: the control, woken by a launch, puts them to sleep again
    assert (after, after_waits) == ("sleep", "0"), out
    assert same == "True"


@pytest.mark.needs_async
@pytest.mark.parametrize("mode,states,control_threads", [
    ("spin", ("off", "off", "off", "off"), ("0", "0")),          # libgomp's own waits: no control
    ("sleep", ("sleep", "sleep", "sleep", "sleep"), ("2", "2")),  # the control's team stays, the host waiting or not
])
def test_team_wait_modes_spin_and_sleep_hold_whatever_the_host_does(mode, states, control_threads):
    out = run(TEAM_WAIT.format(mode=mode), team_wait=mode)
    before, busy, busy_threads, waiting_state, waiting, waiting_threads, waiting_now, idle, idle_wakeups, after, \
        _, same = out
    assert before == "off", out
    assert (busy, waiting_state, idle, after) == states, out
    assert int(idle_wakeups) <= 2, out  # (no control, or one that only waits to be stopped)
    assert (busy_threads, waiting_threads) == control_threads, out
    assert (waiting, waiting_now) == ("1", "0"), out  # the host thread's wait counted either way
    assert same == "True"


def test_an_unknown_team_wait_mode_is_named_and_adaptive_applies():
    err = []
    out = run("""
    from openmtia import _C
    x = torch.randn(1 << 22, device="mtia")
    y = x + x
    y = x + x
    torch.mtia.synchronize()
    print(torch.equal(y.cpu(), x.cpu() * 2))
    """, team_wait="fast", stderr=err)
    assert out == ["True"]
    assert "ignoring OPENMTIA_TEAM_WAIT=fast (adaptive, spin or sleep)" in err[0], err


@pytest.mark.needs_async
def test_a_launch_into_a_full_queue_counts_as_a_host_wait():
    """The launching thread waits for room in the stream's queue: a host
    thread waiting for the device, as in a synchronize."""
    env = dict(os.environ, OPENMTIA_LAUNCH_QUEUE_DEPTH="4")
    body = """
    import threading
    from openmtia import _C
    x = torch.ones(8, device="mtia")
    torch.mtia.synchronize()
    probe = _C._probe_kernel_threads(0, 0.8)  # holds the stream
    seen = []
    def sample():
        time.sleep(0.3)
        seen.append(_C._host_threads_waiting())
    t = threading.Thread(target=sample)
    t.start()
    for _ in range(8):
        x = x + 1  # the queue holds 4: the launching thread waits for room
    t.join()
    torch.mtia.synchronize()
    print(seen[0], _C._host_threads_waiting(), torch.equal(x.cpu(), torch.full((8,), 9.0)))
    """
    out = subprocess.run([sys.executable, "-c", HELPERS + textwrap.dedent(body)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0", "True"], out.stdout


# ---- threads learned per op and size (csrc/aten/threads/learned_threads.h).
# openmtia_test::threads_cost sleeps all_ms on more than one thread and
# one_ms on one, and returns its thread count; over 2^18 elements it runs on
# every thread by its size. Its calls on mtia: the new signature's first
# (synchronous, on the host thread, by size: 2), a warm-up (2), then trials
# on every thread and on one in turn, 3 each, then the choice.
LEARN = """
import openmtia, openmtia._C_test
from openmtia import _C
x = torch.zeros({n}, device="mtia")
ok, bad = torch.zeros(1, device="mtia"), torch.ones(1, device="mtia")
{setup}
got = []
for i in range(12):
    try:
        got.append(int(torch.ops.openmtia_test.threads_cost(x, bad if i == {fail} else ok, {all_ms}, {one_ms})[0]))
    except RuntimeError as e:  # raised at the next synchronize, as a device error
        assert "threads_cost failed on purpose" in str(e), e
        got.append("failed")
print(",".join(map(str, got)))
print(",".join(c[2] for c in _C._kernel_thread_choices() if c[0] == "openmtia_test::threads_cost") or "-")
# a real kernel under the same policy equals CPU's, on every call
a = torch.randn(1 << 18)
d = a.to("mtia")
print(all(torch.equal(torch.cumsum(d, 0).cpu(), torch.cumsum(a, 0)) for _ in range(12)))
print(_C._kernel_threads_mode(), any(c[0].startswith("aten::") for c in _C._kernel_thread_choices()))
"""


def learn(all_ms, one_ms, n=1 << 18, fail=-1, setup="", **env_vars):
    return run(LEARN.format(n=n, fail=fail, setup=setup, all_ms=all_ms, one_ms=one_ms), **env_vars)


def test_a_kernel_no_faster_on_every_thread_learns_to_run_on_one():
    # by default an op outside ATen learns, ATen's (the cumsum) keep their
    # size's threads: CPU PyTorch's bits
    seq, choice, same, mode, aten_learned = learn(all_ms=20.0, one_ms=2.0)
    assert seq == "2,2,2,1,2,1,2,1,1,1,1,1", seq
    assert (choice, same, mode, aten_learned) == ("one", "True", "extensions", "False")


def test_in_learn_mode_atens_kernels_learn_too():
    seq, choice, same, mode, aten_learned = learn(all_ms=20.0, one_ms=2.0, OPENMTIA_KERNEL_THREADS="learn")
    assert seq == "2,2,2,1,2,1,2,1,1,1,1,1", seq
    assert (choice, same, mode, aten_learned) == ("one", "True", "learn", "True")


def test_a_kernel_faster_on_every_thread_keeps_them():
    seq, choice, same, _, _ = learn(all_ms=2.0, one_ms=20.0)
    assert seq == "2,2,2,1,2,1,2,1,2,2,2,2", seq
    assert (choice, same) == ("all", "True")


def test_a_trial_whose_kernel_fails_is_not_timed_and_the_device_stays_usable():
    # the 4th call (a trial on one thread) fails: the trial runs again later
    seq, choice, same, _, _ = learn(all_ms=20.0, one_ms=2.0, fail=3)
    assert seq == "2,2,2,failed,1,2,1,2,1,1,1,1", seq
    assert (choice, same) == ("one", "True")


@pytest.mark.parametrize("how", ["size mode", "deterministic", "small"])
def test_by_size_alone_in_size_mode_under_deterministic_algorithms_and_below_the_parallel_work(how):
    if how == "size mode":
        out = learn(all_ms=20.0, one_ms=2.0, OPENMTIA_KERNEL_THREADS="size")
    elif how == "deterministic":
        out = learn(all_ms=20.0, one_ms=2.0, setup="torch.use_deterministic_algorithms(True)")
    else:  # 1,000 elements: one thread by size, nothing to learn
        out = learn(all_ms=20.0, one_ms=2.0, n=1000)
    expected = "1" if how == "small" else "2"
    mode = "size" if how == "size mode" else "extensions"
    assert out == [",".join([expected] * 12), "-", "True", mode, "False"], out


def test_an_unknown_kernel_threads_mode_is_named_and_learning_applies():
    err = []
    out = run(LEARN.format(n=1 << 18, fail=-1, setup="", all_ms=20.0, one_ms=2.0), stderr=err,
              OPENMTIA_KERNEL_THREADS="fast")
    assert out == ["2,2,2,1,2,1,2,1,1,1,1,1", "one", "True", "extensions", "False"], out
    assert "ignoring OPENMTIA_KERNEL_THREADS=fast (extensions, learn or size)" in err[0], err
