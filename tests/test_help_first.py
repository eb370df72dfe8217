"""Help-first waits (OPENMTIA_HELP_FIRST, docs/architecture.md step 6): a host
thread that waits for a stream runs the stream's queued tasks itself while no
worker has claimed them, in order and each once; the device's semantics stay
(asynchronous launches, errors at the next sync, stream and event order).

Which thread runs a task is observed with the test module's probes (the
native thread id). The runtime's GoogleTests (runtime/tests/engine_test.cpp,
HelpFirst.*) hold the workers, so that the host runs every task: there the
order, once-only and event cases are exact; here they are checked on the
real device, whoever ran each task."""
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import openmtia._C_test  # the test-only module (launch_thread_probe, ...)

probe = openmtia._C_test.launch_thread_probe


def assert_ran_once_in_order(probes):
    orders = [p.order for p in probes]
    assert all(o > 0 for o in orders), "a task did not run"
    assert orders == sorted(orders) and len(set(orders)) == len(orders), orders


def run_probes(rounds, per_round=20, until_host=False):
    """Rounds of probes and a synchronize, each after a pause in which the
    stream's worker goes to sleep (a worker that runs tasks claims each new
    one at once; a sleeping one wakes in tens of microseconds, while a launch
    returns in a few); how many probes ran on this thread."""
    me = threading.get_native_id()
    on_host = 0
    for _ in range(rounds):
        time.sleep(0.01)
        probes = [probe(0) for _ in range(per_round)]
        torch.mtia.synchronize()
        assert_ran_once_in_order(probes)
        on_host += sum(p.thread_id == me for p in probes)
        if until_host and on_host:
            break
    return on_host


@pytest.mark.needs_async
def test_a_synchronizing_host_thread_runs_queued_tasks_in_order():
    # (the test command also runs this file with OPENMTIA_HELP_FIRST=0 and
    # OPENMTIA_INLINE_LAUNCHES=never: then no task runs on a host thread)
    if os.environ.get("OPENMTIA_HELP_FIRST", "1") == "1":
        assert run_probes(300, until_host=True) > 0, "in 300 rounds no synchronize ran a queued task"
    else:
        assert run_probes(50) == 0, "a synchronize ran a queued task with OPENMTIA_HELP_FIRST=0"


def run_child(code, **env):
    env = dict(os.environ, **env)
    if env.get("OPENMTIA_DRIVER") == "reference":
        env.pop("OPENMTIA_STRICT_MEMORY", None)  # (the reference driver has no strict memory mode)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.needs_async
@pytest.mark.parametrize("setting", ["0", "1"])
def test_the_setting_turns_help_first_off_and_on(setting):
    out = run_child("""
        import os, sys; sys.path.insert(0, "tests")
        import torch, test_help_first as t
        print("on_host", t.run_probes(300, until_host=True) if os.environ["OPENMTIA_HELP_FIRST"] == "1" else
              t.run_probes(100))
        x = torch.arange(10.0, device="mtia")
        print("sum", (x * 2).sum().item())
    """, OPENMTIA_HELP_FIRST=setting, OPENMTIA_INLINE_LAUNCHES="never")  # (no launch runs on the host either)
    on_host = int(out.split("on_host ")[1].split()[0])
    assert "sum 90.0" in out
    if setting == "0":
        assert on_host == 0  # the host only waits
    else:
        assert on_host > 0


@pytest.mark.needs_async
def test_two_threads_synchronizing_one_stream_run_each_task_once():
    s = torch.mtia.Stream()
    for _ in range(20):
        with torch.mtia.stream(s):
            probes = [probe(0) for _ in range(300)]
        barrier = threading.Barrier(2)
        errors = []

        def wait():
            try:
                barrier.wait()
                s.synchronize()
            except Exception as e:  # (re-raised below, in the test's thread)
                errors.append(e)

        other = threading.Thread(target=wait)
        other.start()
        wait()
        other.join()
        assert not errors, errors
        assert_ran_once_in_order(probes)


def test_a_failing_task_raises_at_the_synchronize_whoever_runs_it():
    x = torch.ones(8, device="mtia")
    (x + 1).cpu()
    for _ in range(5):
        openmtia._C_test.launch_failing_task(0, "bad_task", "bad data")  # returns: the error is the device's
        y = x * 3
        with pytest.raises(RuntimeError, match="asynchronous task 'bad_task' failed on mtia:0.*bad data"):
            torch.mtia.synchronize()
        torch.mtia.synchronize()  # raised once
        assert torch.equal(y.cpu(), torch.full((8,), 3.0))  # the work after it ran; the device is usable


def test_a_stream_waiting_for_another_streams_event_keeps_order():
    a = torch.randn(256, 256)
    s1, s2 = torch.mtia.Stream(), torch.mtia.Stream()
    for _ in range(10):
        with torch.mtia.stream(s1):
            x = a.to("mtia")
            for _ in range(20):
                x = torch.tanh(x @ x.T / 256)
            e = torch.mtia.Event()
            e.record(s1)
        s2.wait_event(e)
        with torch.mtia.stream(s2):
            y = x.sum(0)
        s2.synchronize()  # helps s1 up to the record, then s2
        ref = a
        for _ in range(20):
            ref = torch.tanh(ref @ ref.T / 256)
        torch.testing.assert_close(y.cpu(), ref.sum(0))
        x.record_stream(s2)


@pytest.mark.parametrize("driver", ["emulated", "reference"])
def test_device_work_run_by_a_host_thread_does_not_see_the_programs_thread_state(driver):
    # A task run on a host thread (a help-first wait; every task of the
    # reference driver, a graph's replay included) runs as the device: a
    # dispatch mode the program entered sees mtia's ops, never the calls
    # inside their CPU kernels (det's, sort's and qr's kernels call other ops
    # through the dispatcher). Without the host-work hook it saw them all.
    out = run_child("""
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = []
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))
        a = torch.randn(40, 40)
        ma = a.to("mtia")
        for name, f in [("det", torch.linalg.det), ("sort", lambda t: torch.sort(t, 1)[0]),
                        ("qr", lambda t: torch.linalg.qr(t)[1])]:
            f(ma); torch.mtia.synchronize()
            g = torch.mtia.MTIAGraph()
            with torch.mtia.graph(g):
                out = f(ma)
            with Seen() as replayed:
                g.replay()
                torch.mtia.synchronize()
            with Seen() as launched:
                r = f(ma)
                n = len(launched.ops)
                torch.mtia.synchronize()
            print(name, "replay", replayed.ops, "sync", launched.ops[n:])
            torch.testing.assert_close(out.cpu(), f(a))
            torch.testing.assert_close(r.cpu(), f(a))
    """, OPENMTIA_DRIVER=driver)
    for name in ("det", "sort", "qr"):
        assert f"{name} replay [] sync []" in out, out
