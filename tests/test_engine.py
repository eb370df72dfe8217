"""The engine under pressure: stream-ordered memory, bounded launch queues,
plans keyed by global state, forked children and Ctrl-C (CUDA's behaviour)."""
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import openmtia

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import pressure_demo  # noqa: E402  (bench/: the scenarios of the pressure demo)
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)

MiB = 1 << 20


def hold(device=0):
    """Holds the current stream of `device` until .release()."""
    return openmtia._C_test.launch_blocking_task(device)


def warm(fn):
    """Runs fn once and waits: a signature's first call runs synchronously
    (it makes the signature's plan); later calls are asynchronous."""
    fn()
    torch.mtia.synchronize()


def run_python(code, env=None, timeout=300):
    full_env = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# ---------------------------------------------------------------- 1. memory in stream order

@pytest.mark.needs_async
@pytest.mark.allocator_state
def test_memory_freed_by_the_host_is_reused_at_once_on_its_stream():
    a = torch.randn(1024, 1024, device="mtia")
    warm(lambda: a @ a)
    torch.mtia.reset_peak_memory_stats()
    base = torch.mtia.memory_allocated()
    gate = hold()  # the device is busy: every matmul below is still queued
    try:
        for _ in range(200):
            b = a @ a
        assert not torch.mtia.current_stream().query()
        # the host ran ahead of the device by 200 ops; CUDA holds two or three 4 MiB blocks
        assert torch.mtia.max_memory_allocated() - base <= 3 * 4 * MiB
    finally:
        gate.release()
    assert torch.allclose(b.cpu(), a.cpu() @ a.cpu(), atol=1e-3, rtol=1e-4)


@pytest.mark.needs_async
def test_a_reused_block_keeps_stream_order():
    # x's block goes back at `del x` while the task that reads it is still queued;
    # the next allocation gets it, and its writer runs after that reader
    warm(lambda: (torch.full((1 << 16,), 3.0, device="mtia") * 2, torch.full((1 << 16,), 5.0, device="mtia")))
    gate = hold()
    x = torch.full((1 << 16,), 3.0, device="mtia")
    y = x * 2
    ptr = x.data_ptr()
    del x
    z = torch.full((1 << 16,), 5.0, device="mtia")
    assert z.data_ptr() == ptr
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 6.0))
    assert torch.equal(z.cpu(), torch.full((1 << 16,), 5.0))


@pytest.mark.needs_async
def test_record_stream_defers_reuse_until_the_other_stream_passed_the_free():
    side = torch.mtia.Stream()
    x = torch.ones(1 << 16, device="mtia")
    ptr = x.data_ptr()
    with torch.mtia.stream(side):
        warm(lambda: x * 2)  # (a first call waits for its stream: not behind the gate)
    torch.mtia.synchronize()
    with torch.mtia.stream(side):
        gate = hold()  # side is busy
        y = x * 2      # side reads x (allocated on the default stream)
    x.record_stream(side)
    del x
    z = torch.empty(1 << 16, device="mtia")  # on the default stream
    assert z.data_ptr() != ptr  # side has not passed the free yet
    z.fill_(7)
    gate.release()
    side.synchronize()
    w = torch.empty(1 << 16, device="mtia")
    assert w.data_ptr() == ptr  # now it has
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 2.0))
    del w


def test_without_record_stream_the_block_is_reused_at_once():
    side = torch.mtia.Stream()
    x = torch.ones(1 << 16, device="mtia")
    ptr = x.data_ptr()
    torch.mtia.synchronize()
    del x
    z = torch.empty(1 << 16, device="mtia")
    assert z.data_ptr() == ptr
    del z
    with torch.mtia.stream(side):  # another stream's pool: never this block
        w = torch.empty(1 << 16, device="mtia")
    assert w.data_ptr() != ptr


def test_record_stream_with_another_devices_stream_raises():
    assert torch.mtia.device_count() >= 2  # the default configuration
    x = torch.ones(4, device="mtia:0")
    with pytest.raises(RuntimeError, match="stream belongs to mtia:1"):
        x.record_stream(torch.mtia.Stream(device=1))
    x.record_stream(torch.mtia.Stream(device=0))  # the device is fine
    assert x.sum().item() == 4


def adamw_steps(model, opt, data, target, steps):
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        opt.step()


@pytest.mark.needs_async
@pytest.mark.allocator_state
def test_a_warm_adamw_loop_is_flat_while_the_device_is_busy():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to("mtia")
    opt = torch.optim.AdamW(model.parameters())
    data, target = torch.randn(32, 256, device="mtia"), torch.randint(0, 10, (32,), device="mtia")
    adamw_steps(model, opt, data, target, 3)
    torch.mtia.synchronize()
    stats = torch.mtia.memory_stats()
    reserved, device_allocs = torch.accelerator.memory_reserved(), stats["num_device_alloc"]
    gate = hold()  # the host runs ahead (as far as its launch queue lets it), as on a busy machine
    threading.Timer(0.5, gate.release).start()
    t0 = time.time()
    adamw_steps(model, opt, data, target, 100)
    assert time.time() - t0 < 10  # a full launch queue waited for the timer thread, not the gate's time-out
    assert torch.accelerator.memory_reserved() == reserved
    assert torch.mtia.memory_stats()["num_device_alloc"] == device_allocs
    torch.mtia.synchronize()
    assert torch.accelerator.memory_reserved() == reserved


def test_ten_thousand_steps_without_a_sync_run_on_a_256M_device():
    out = run_python(pressure_demo.NO_SYNC_TRAINING, env={"OPENMTIA_DEVICE_MEMORY": "256M"})
    assert int(out.split()[-1]) <= 8 * MiB


@pytest.mark.needs_async
@pytest.mark.allocator_state
def test_empty_cache_waits_for_queued_work_using_freed_blocks():
    warm(lambda: torch.full((1 << 20,), 2.0, device="mtia") * 3)
    gate = hold()
    x = torch.full((1 << 20,), 2.0, device="mtia")
    y = x * 3  # queued: reads x
    assert not torch.mtia.current_stream().query()
    del x      # x's block is free (reusable on this stream) while y's task still reads it
    threading.Timer(0.2, gate.release).start()
    t0 = time.time()
    torch.mtia.empty_cache()  # returns the segment to the device only after the queued work ran
    assert time.time() - t0 < 10  # (not the gate's 30 s time-out: empty_cache lets the timer thread run)
    assert torch.equal(y.cpu(), torch.full((1 << 20,), 6.0))


# ---------------------------------------------------------------- 2. bounded launch queue

@pytest.mark.needs_async
def test_a_launch_into_a_full_queue_waits_without_the_gil():
    depth = 64
    out = run_python(f"""
        import threading, time, torch, openmtia, openmtia._C_test
        x = torch.zeros(16, device="mtia")
        x.add_(1); torch.mtia.synchronize()
        gate = openmtia._C_test.launch_blocking_task(0)
        launched = [0]
        def launcher():
            for _ in range({depth} * 4):
                x.add_(1)
                launched[0] += 1
        t = threading.Thread(target=launcher)
        t.start()
        ticks = 0
        deadline = time.time() + 1.0
        while time.time() < deadline:  # this thread runs: the launcher waits without the GIL
            ticks += 1
        print("launched", launched[0], "ticks", ticks, "alive", t.is_alive())
        gate.release()
        t.join()
        print("value", x[0].item())
    """, env={"OPENMTIA_LAUNCH_QUEUE_DEPTH": str(depth)})
    words = out.split()
    launched, ticks, alive, value = int(words[1]), int(words[3]), words[5], float(words[7])
    assert launched <= depth  # the gate task and at most depth-1 more are pending
    assert alive == "True" and ticks > 1000
    assert value == 1 + depth * 4


def test_host_memory_stays_flat_however_far_the_host_runs_ahead():
    out = run_python("""
        import resource, torch, openmtia
        x = torch.zeros(256, device="mtia")
        for _ in range(3000):
            x.add_(1)
        torch.mtia.synchronize()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(20000):
            x.add_(1)
        torch.mtia.synchronize()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0, x[0].item())
    """)
    grown_kb, value = out.split()
    assert float(value) == 23000
    assert int(grown_kb) < 8 * 1024  # 20,000 queued tasks would take about 24 MB


# ---------------------------------------------------------------- 4. plans and global state

def test_default_dtype_changes_the_result_of_a_planned_signature():
    a = torch.tensor([1, 2, 3], device="mtia")
    assert (a / a).dtype == torch.float32  # planned under float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        r = a / a
        assert r.dtype == (a.cpu() / a.cpu()).dtype == torch.float64
        assert torch.equal(r.cpu(), torch.ones(3, dtype=torch.float64))
    finally:
        torch.set_default_dtype(old)
    assert (a / a).dtype == torch.float32


def test_deterministic_and_grad_modes_are_part_of_the_plan_key():
    # each flip must plan anew (or reuse a plan made under the same state):
    # results follow CPU under every combination
    x = torch.randn(6, 5)
    idx = torch.tensor([0, 2, 2, 4])
    src = torch.randn(4, 5)
    old = torch.are_deterministic_algorithms_enabled()
    try:
        for det in (False, True, False):
            torch.use_deterministic_algorithms(det)
            for grad in (True, False, True):
                inference = torch.inference_mode() if (not grad and det) else contextlib.nullcontext()
                with torch.set_grad_enabled(grad), inference:
                    got = x.to("mtia").index_add(0, idx.to("mtia"), src.to("mtia")).cpu()
                    expect = x.index_add(0, idx, src)
                    assert torch.allclose(got, expect), (det, grad)
                    y = torch.randn(3, 4, requires_grad=True)
                    m = torch.nn.functional.layer_norm(y.to("mtia"), (4,))
                    assert m.requires_grad == grad
                    assert m.is_inference() == torch.is_inference_mode_enabled()
    finally:
        torch.use_deterministic_algorithms(old)


# ---------------------------------------------------------------- 5. fork and Ctrl-C

def test_a_forked_child_raises_instead_of_hanging():
    out = run_python("""
        import os, torch
        a = torch.arange(6., device="mtia")
        (a * 2).cpu()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            msgs = []
            for f in (lambda: a.cpu(), lambda: (a * 3)[1].item(), lambda: torch.mtia.synchronize(),
                      lambda: torch.ones(2, device="mtia")):
                try:
                    f()
                    msgs.append("no error")
                except RuntimeError as e:
                    msgs.append(str(e).split(".")[0])
            os.write(w, "|".join(msgs).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        print(os.read(r, 4096).decode())
        print("parent", (a + 1).sum().item())
    """, timeout=60)
    child, parent = out.strip().splitlines()
    assert child.split("|") == ["Cannot re-initialize MTIA in forked subprocess"] * 4
    assert parent == "parent 21.0"


def test_a_child_forked_before_the_device_was_used_may_use_cpu_torch():
    run_python("""
        import os, torch
        n = torch.mtia.device_count()
        pid = os.fork()
        if pid == 0:
            ok = torch.mtia.device_count() == n and torch.ones(3).sum().item() == 3
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert status == 0
    """, timeout=60)


@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_ctrl_c_during_the_first_mtia_op_raises_keyboard_interrupt(delay):
    code = textwrap.dedent("""
        import time, torch
        print("ready", flush=True)
        t0 = time.time()
        try:
            a = torch.randn(100, 100, device="mtia")
            b = (a @ a).relu().sum()
            while time.time() - t0 < 20:
                pass
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
    """)
    # the child gets SIGINT's default disposition: a test run started as a
    # background job (SIGINT ignored, inherited) must not decide the outcome
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline().strip() == "ready"
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert out.strip() == "KeyboardInterrupt", out + err


# ---------------------------------------------------------------- 6. smaller semantics

def test_an_event_recorded_on_another_device_raises_with_both_indices():
    e = torch.Event(device="mtia")
    with torch.mtia.device(1):
        e.record(torch.mtia.current_stream())
    with pytest.raises(RuntimeError, match=r"Event device index 1 does not match recording stream's device index 0\."):
        e.record(torch.mtia.Stream(device=0))
    e.synchronize()
    assert e.query()


def test_torch_accelerator_reports_the_device_capability():
    cap = torch.accelerator.get_device_capability()
    assert cap == torch.accelerator.get_device_capability("mtia:0")
    dtypes = cap["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64} <= dtypes
    assert torch.qint8 not in dtypes
    assert torch.mtia.get_device_capability() == (1, 0)
    with pytest.raises(RuntimeError, match="invalid mtia device index 9"):
        torch.accelerator.get_device_capability("mtia:9")


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("make", [
    lambda x: torch.quantize_per_tensor(x, 0.1, 0, torch.qint8).to("mtia"),
    lambda x: torch.quantize_per_tensor(x.to("mtia"), 0.1, 0, torch.qint8),
])
def test_quantized_entry_points_raise_the_strided_only_error(make):
    # (sparse mtia tensors exist: tests/test_sparse.py)
    with pytest.raises(NotImplementedError, match="openmtia supports strided tensors only: .* on quantized mtia"):
        make(torch.randn(4))
    assert torch.ones(2, device="mtia").sum().item() == 2


# ---------------------------------------------------------------- 3. errors at the op

def cases_at_the_call():
    d = "mtia"
    x = torch.randn(4, 4, device=d)
    i = torch.tensor([1, 2], device=d)
    idx = torch.tensor([0, 1], device=d)
    return [
        ("out= dtype", RuntimeError, "can't be cast to the desired output type",
         lambda: torch.add(x, x, out=torch.empty(4, 4, dtype=torch.int64, device=d))),
        ("cat overlap", RuntimeError, "unsupported operation", lambda: torch.cat([x, x], out=x)),
        ("index_copy_ overlap", RuntimeError, "unsupported operation", lambda: x.index_copy_(0, idx, x[:2])),
        ("index_add_ overlap", RuntimeError, "unsupported operation", lambda: x.index_add_(0, idx, x[:2])),
        ("scatter_ overlap", RuntimeError, "unsupported operation",
         lambda: x.scatter_(0, torch.zeros(2, 4, dtype=torch.long, device=d), x[:2])),
        ("add alpha", RuntimeError, "alpha must not be a floating point", lambda: torch.add(i, i, alpha=1.5)),
        ("sub alpha", RuntimeError, "alpha must not be a floating point", lambda: torch.sub(i, i, alpha=1.5)),
        ("floor complex", NotImplementedError, "floor is not supported for complex",
         lambda: torch.floor(torch.randn(3, dtype=torch.complex64, device=d))),
        ("empty index", IndexError, "out of bounds for dimension with size 0",
         lambda: torch.randn(0, device=d)[torch.tensor([1], device=d)]),
    ]


@pytest.mark.parametrize("case", range(len(cases_at_the_call())))
def test_argument_errors_raise_at_the_call_on_every_call(case):
    name, exc, pattern, call = cases_at_the_call()[case]
    for _ in range(3):  # the first call of a signature and cached ones alike
        with pytest.raises(exc, match=pattern):  # a task-time error would only come at the sync below
            call()
        torch.mtia.synchronize()  # nothing left behind for the next sync
    assert torch.ones(2, device="mtia").sum().item() == 2


def test_an_aliasing_pattern_is_planned_on_its_own():
    # the same shapes without overlap run asynchronously; the overlapping call raises
    x = torch.randn(4, 4, device="mtia")
    y = torch.randn(4, 4, device="mtia")
    idx = torch.tensor([0, 1], device="mtia")
    for _ in range(2):
        x.index_add_(0, idx, y[:2])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x.index_add_(0, idx, x[:2])
    x.index_add_(0, idx, y[:2])
    torch.mtia.synchronize()


def test_errors_that_depend_on_device_data_raise_at_the_next_sync_naming_the_op():
    x = torch.randn(4, 4, device="mtia")
    bad = torch.tensor([10], device="mtia")  # the value lives on the device
    y = x[bad]  # as CUDA's device-side assert: not known at the call
    with pytest.raises(RuntimeError, match="asynchronous task 'aten::index' failed.*index 10 is out of bounds"):
        torch.mtia.synchronize()
    del y
    assert torch.ones(2, device="mtia").sum().item() == 2


def test_kernel_warnings_are_python_warnings_at_every_call():
    x = torch.empty(5, device="mtia")
    for _ in range(3):
        with pytest.warns(UserWarning, match="out of bounds"):
            x.random_(0, 2**60)
    torch.mtia.synchronize()
