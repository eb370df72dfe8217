"""Inline launches (OPENMTIA_INLINE_LAUNCHES, docs/architecture.md step 6): a
task launched onto an idle stream runs on the launching thread ("always"; in
"auto", while the process's threads wait for cores: measured from their
schedstat), with the device's semantics kept: results as on CPU, errors at
the next synchronization, stream order. "never" (the default) hands every
task to the stream's worker. The runtime's GoogleTests (InlineLaunch.*,
CoreContention.*) check the engine's side; here the framework's, in child
processes with each setting."""
import os
import subprocess
import sys

import pytest

from test_help_first import run_child

CORRECT_AND_DEFERRED = """
    import threading, time, pytest, torch, openmtia._C_test
    me = threading.get_native_id()
    torch.manual_seed(0)
    x = torch.randn(300, 200)
    y = ((x.to("mtia") * 2 + 1).sin() @ x.t().to("mtia")).softmax(-1)
    torch.testing.assert_close(y.cpu(), ((x * 2 + 1).sin() @ x.t()).softmax(-1))
    # a device-data error: raised at the next synchronize, never at the call
    src = torch.randn(4, 3, device="mtia")
    bad = torch.tensor([[0, 1, 2], [7, 0, 0]], device="mtia")
    for _ in range(2):  # a signature's first call, then a later one
        torch.gather(src, 0, torch.zeros_like(bad))
        torch.mtia.synchronize()
        torch.gather(src, 0, bad)
        with pytest.raises(RuntimeError, match="aten::gather"):
            torch.mtia.synchronize()
    assert torch.equal(torch.gather(src, 0, torch.zeros(1, 3, dtype=torch.long, device="mtia")).cpu(), src.cpu()[:1])
    # (after tasks with parallel kernels, as the matmul's and softmax's, the
    # stream's tasks stay on its worker until 8 in a row ran without: one
    # thread team, test_a_parallel_kernel_keeps_the_stream_on_its_worker)
    for _ in range(8):
        openmtia._C_test.launch_thread_probe(0)
        torch.mtia.synchronize()
    time.sleep(0.02)  # the stream's worker goes to sleep
    p = openmtia._C_test.launch_thread_probe(0)
    # run before the synchronize on this thread: inside the launch (a worker
    # may also have run it by now, on its own thread)
    in_launch = p.order > 0 and p.thread_id == me
    torch.mtia.synchronize()
    print("in_launch", int(in_launch))
"""


def test_always_runs_launches_onto_an_idle_stream_in_the_launch_with_errors_at_the_sync():
    out = run_child(CORRECT_AND_DEFERRED, OPENMTIA_INLINE_LAUNCHES="always")
    assert "in_launch 1" in out, out


def test_never_hands_every_task_to_the_streams_worker():
    out = run_child(CORRECT_AND_DEFERRED, OPENMTIA_INLINE_LAUNCHES="never")
    assert "in_launch 0" in out, out  # (on a worker, or run by the synchronize: help-first)


def test_an_invalid_setting_is_named_and_the_default_kept():
    r = subprocess.run([sys.executable, "-c", "import torch; print((torch.ones(3, device='mtia') * 2).sum().item())"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OPENMTIA_INLINE_LAUNCHES="sometimes"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "openmtia: ignoring invalid OPENMTIA_INLINE_LAUNCHES='sometimes' (never, always or auto)" in r.stderr
    assert r.stdout.split()[-1] == "6.0"


@pytest.mark.parametrize("setting", ["auto", "never"])
def test_auto_runs_launches_inline_while_the_process_has_no_core_to_spare(setting):
    # the child and two busy processes share one core: its launching thread
    # waits for the core, so in "auto" a launch onto an idle stream runs on
    # it; in "never" it still goes to the worker
    cpu = sorted(os.sched_getaffinity(0))[0]
    hogs = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
            for _ in range(2)]
    try:
        out = run_child(f"""
            import os, threading, time, torch, openmtia._C_test
            os.sched_setaffinity(0, {{{cpu}}})
            me = threading.get_native_id()
            a = torch.randn(64, 64, device="mtia")
            inline = 0
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not inline:
                for _ in range(20):
                    a = (a @ a).tanh()  # work: the threads want the core
                p = openmtia._C_test.launch_thread_probe(0)
                inline = int(p.order > 0 and p.thread_id == me)
                torch.mtia.synchronize()
                if "{setting}" == "never" and time.monotonic() > deadline - 18:
                    break
            b = torch.randn(64, 64)  # CPU's results, whoever ran the kernels
            torch.testing.assert_close((b.to("mtia") @ b.to("mtia")).tanh().cpu(), (b @ b).tanh())
            print("inline", inline)
        """, OPENMTIA_INLINE_LAUNCHES=setting)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert f"inline {int(setting == 'auto')}" in out, out


ONE_TEAM = """
    import os, threading, torch, openmtia._C_test
    me = threading.get_native_id()
    comm = open(f"/proc/self/task/{me}/comm").read()

    def host_team():  # the threads named as this one: its OpenMP team's (a worker's team's are named mtia<d>s<n>)
        return {t for t in os.listdir("/proc/self/task")
                if int(t) != me and open(f"/proc/self/task/{t}/comm").read() == comm}

    def on_this_thread(n):  # where each of n launches onto the idle stream ran
        out = []
        for _ in range(n):
            p = openmtia._C_test.launch_thread_probe(0)
            torch.mtia.synchronize()
            out.append(p.thread_id == me)
        return out

    # (no CPU kernel on this thread: its own OpenMP team would hide the device's)
    # an eager kernel, or a compiled one (Inductor's C++ with its own parallel region)
    f = (lambda x: x * 3) if os.environ["KERNEL"] == "eager" else torch.compile(lambda x: x * 3)
    x = torch.arange(1 << 20, device="mtia", dtype=torch.float32)
    y = f(x)  # (a signature's first call runs on this thread, not as a task; compiled: a task)
    y = f(x)  # a task whose kernel runs on every thread (1M elements)
    torch.mtia.synchronize()
    if os.environ["OPENMTIA_ONE_TEAM"] == "0":  # every launch onto the idle stream inline
        assert on_this_thread(9) == [True] * 9
        y = f(x)
        assert on_this_thread(1) == [True]
        assert torch.equal(y.cpu(), torch.arange(1 << 20, dtype=torch.float32) * 3)
        print("ok")
        raise SystemExit
    assert on_this_thread(9) == [False] * 8 + [True]  # the worker's until 8 tasks without parallel regions ran
    before = host_team()
    y = f(x)  # inline (the stream idle, 8 serial tasks ran), on every thread
    assert host_team() <= before, (before, host_team())  # the team it made on this thread ended
    torch.mtia.synchronize()
    assert on_this_thread(9) == [False] * 8 + [True]
    assert torch.equal(y.cpu(), torch.arange(1 << 20, dtype=torch.float32) * 3)
    print("ok")
"""


@pytest.mark.parametrize("setting,kernel", [("1", "eager"), ("0", "eager"), ("1", "compiled")])
def test_a_parallel_kernel_keeps_the_stream_on_its_worker(setting, kernel):
    # One thread team (architecture.md step 6): a task whose kernel spreads
    # over several cores stays on the stream's worker, whose team persists;
    # run inline (or by a helping host thread), the host's team ends after it.
    # OPENMTIA_ONE_TEAM=0 turns the rule off.
    out = run_child(ONE_TEAM, OPENMTIA_INLINE_LAUNCHES="always", OPENMTIA_ONE_TEAM=setting, KERNEL=kernel)
    assert out.split()[-1] == "ok", out


def test_an_invalid_one_team_setting_is_named_and_the_default_kept():
    r = subprocess.run([sys.executable, "-c", "import torch; print((torch.ones(3, device='mtia') * 2).sum().item())"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OPENMTIA_ONE_TEAM="5"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "openmtia: ignoring invalid OPENMTIA_ONE_TEAM='5'" in r.stderr
    assert r.stdout.split()[-1] == "6.0"


STATE_SWAPS = """
    import torch, openmtia
    from torch.utils._python_dispatch import TorchDispatchMode
    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    import contextlib
    x = torch.randn(64)
    m = x.to("mtia")
    (m * 2 + 1).cpu()  # (the signatures' first calls)
    states = {
        "plain": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
        "autocast_cpu": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        "dispatch_mode": Mode,
        "profiler": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
    }
    for name, state in states.items():
        before = openmtia._C._host_work_state_swaps()
        with state():
            for _ in range(20):
                y = m * 2 + 1
            torch.mtia.synchronize()
        swaps = openmtia._C._host_work_state_swaps() - before
        assert torch.equal(y.cpu(), x * 2 + 1), name
        print(name, "swaps", int(swaps > 0))
"""


def test_a_host_thread_in_a_fresh_threads_state_runs_device_work_in_it():
    # Device work on a host thread runs in a fresh thread's state: a thread
    # already in one (a plain loop) keeps its own, unswapped; one whose
    # grad mode, autocast, dispatch modes or profiler differ is swapped to a
    # fresh state and back (what the kernels may see:
    # test_help_first.py's thread-state test)
    out = run_child(STATE_SWAPS, OPENMTIA_INLINE_LAUNCHES="always")
    assert "plain swaps 0" in out, out
    for name in ("no_grad", "inference_mode", "autocast_cpu", "dispatch_mode", "profiler"):
        assert f"{name} swaps 1" in out, out
