"""Faults on demand (openmtia.faults, OPENMTIA_FAULTS; docs/faults.md): the
emulated device fails when asked, and each fault reaches the program as a
real accelerator's would: an out-of-memory at the allocation (after the
caching allocator's retry, its observers called), a faulting kernel at the
next synchronization naming the op and stream, the device usable after."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import openmtia.faults as faults

pytestmark = pytest.mark.needs_async  # (the emulated driver: the reference one injects none, tested below)


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.clear()


def run(code, **env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-3000:]  # (the exit's own handlers raise nothing)
    return out.stdout


def test_an_out_of_memory_fault_raises_at_the_allocation_after_the_allocators_retry():
    torch.mtia.synchronize()
    torch.mtia.empty_cache()
    seen = []
    torch.mtia.attach_out_of_memory_observer(lambda *args: seen.append(args))
    before = torch.mtia.memory_stats()
    with faults.injected("oom", device=0, times=0):
        with pytest.raises(torch.OutOfMemoryError, match="mtia out of memory. Tried to allocate 20.00 MiB"):
            torch.empty(5 << 20, device="mtia")
    after = torch.mtia.memory_stats()
    assert after["num_alloc_retries"] == before["num_alloc_retries"] + 1  # the cache freed, the allocation retried
    assert after["num_ooms"] == before["num_ooms"] + 1
    assert seen and seen[-1][:2] == (0, 20 << 20), seen  # the observer: device, bytes asked for
    x = torch.ones(5 << 20, device="mtia")  # the device goes on
    assert x.sum().item() == 5 << 20


def test_an_out_of_memory_fault_the_retry_absorbs_raises_nothing():
    torch.mtia.synchronize()
    torch.mtia.empty_cache()
    before = torch.mtia.memory_stats()
    # the allocator asks the device twice for a new segment, then frees its
    # cache and asks again: two failed allocations are absorbed
    with faults.injected("oom", device=0, times=2):
        x = torch.full((5 << 20,), 2.0, device="mtia")
    after = torch.mtia.memory_stats()
    assert after["num_alloc_retries"] == before["num_alloc_retries"] + 1
    assert after["num_ooms"] == before["num_ooms"]
    assert x.sum().item() == 2 * (5 << 20)


def test_a_fault_on_another_device_leaves_this_one_alone():
    torch.mtia.synchronize()
    torch.mtia.empty_cache()
    with faults.injected("oom", device=1, times=0):
        assert torch.ones(5 << 20, device="mtia:0").sum().item() == 5 << 20
        with pytest.raises(torch.OutOfMemoryError, match="mtia:1"):
            torch.ones(5 << 20, device="mtia:1")


def test_a_pinned_out_of_memory_fault_raises_at_the_allocation():
    with faults.injected("pinned_oom", times=0):
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(3 << 20).pin_memory()
    assert torch.ones(3 << 20).pin_memory().is_pinned()


def test_a_kernel_fault_raises_at_the_next_synchronization_naming_the_op():
    a = torch.randn(64, 64, device="mtia")
    b = torch.randn(64, 64, device="mtia")
    (a @ b).sum().item()  # (the signature's first call ran already)
    with faults.injected("kernel", op="aten::mm"):
        y = a @ b  # the call returns: the kernel faults on the device
        z = a + b
        # (a device's error is torch.AcceleratorError, a RuntimeError, as CUDA's)
        with pytest.raises(torch.AcceleratorError, match=r"asynchronous task 'aten::mm' failed on mtia:0 stream \d+: "
                                                         r"injected fault: the device faulted in 'aten::mm'") as e:
            torch.mtia.synchronize()
        assert e.value.error_code == 4  # (the driver's OMTIA_ERROR_TASK_FAILED)
    del y
    # the fault was not sticky: the device and its other work go on, as CPU's
    torch.testing.assert_close(z.cpu(), a.cpu() + b.cpu())
    torch.testing.assert_close((a @ b).cpu(), a.cpu() @ b.cpu())


def test_a_kernel_fault_in_a_signatures_first_call_raises_at_the_next_synchronization():
    # a signature's first call runs its kernel on the host thread, at the
    # call (its argument errors raise there): a fault armed for it still
    # counts it and raises at the next synchronization, as a launched one's
    a = torch.randn(33, 17, device="mtia")
    b = torch.randn(17, 5, device="mtia")  # (a shape no other test multiplies)
    torch.mtia.synchronize()
    with faults.injected("kernel", op="aten::mm"):
        y = a @ b  # returns
        with pytest.raises(torch.AcceleratorError, match=r"asynchronous task 'aten::mm' failed on mtia:0 stream \d+: "
                                                         r"injected fault: the device faulted in 'aten::mm'"):
            torch.mtia.synchronize()
    torch.mtia.synchronize()  # once
    torch.testing.assert_close((a @ b).cpu(), a.cpu() @ b.cpu())
    del y


def test_the_nth_piece_of_work_on_a_stream_faults():
    side = torch.mtia.Stream()
    x = torch.arange(8.0, device="mtia")
    with torch.mtia.stream(side):
        for op in (torch.add, torch.sub, torch.mul, torch.div):
            op(x, 2)  # (first calls: synchronous, before the fault)
        side.synchronize()
        with faults.injected("kernel", stream=side, after=3):
            torch.add(x, 2)
            torch.sub(x, 2)
            torch.mul(x, 2)
            torch.div(x, 2)
            with pytest.raises(RuntimeError, match=f"task 'aten::mul' failed on mtia:0 stream {side.stream_id}"):
                side.synchronize()
        assert torch.mul(x, 2).cpu().tolist() == [2.0 * i for i in range(8)]


def test_a_seeded_rate_fails_the_same_work_each_time():
    x = torch.ones(4, device="mtia")
    (x + 1).sum().item()

    def failures(seed):
        failed = []
        with faults.injected("kernel", op="aten::add", rate=0.5, seed=seed):
            for i in range(24):
                x.add(1)
                try:
                    torch.mtia.synchronize()
                except RuntimeError:
                    failed.append(i)
        return failed
    first = failures(7)
    assert 0 < len(first) < 24
    assert failures(7) == first
    assert failures(8) != first


def test_bad_faults_are_value_errors():
    with pytest.raises(ValueError, match="unknown fault kind 'disk'"):
        faults.inject("disk")
    with pytest.raises(ValueError, match="after counts from 1"):
        faults.inject("kernel", after=0)
    with pytest.raises(ValueError, match="unknown setting 'op'"):
        faults.inject("oom", op="aten::mm")
    with pytest.raises(ValueError, match="not a probability"):
        faults.inject("kernel", rate=2)
    with pytest.raises(ValueError, match="unknown setting 'sticky'"):
        faults.inject("lost", sticky=True)


def test_openmtia_faults_faults_an_unmodified_program():
    out = run("""
        import torch
        x = torch.ones(4, device="mtia")
        for i in range(3):
            try:
                (x * 2).sum().item()
                print("ok", flush=True)
            except RuntimeError as e:
                print("failed:", "injected fault" in str(e) and "'aten::mul'" in str(e), flush=True)
    """, OPENMTIA_FAULTS="kernel:op=aten::mul,after=2")
    assert out.split("\n")[:3] == ["ok", "failed: True", "ok"], out


def test_openmtia_faults_per_rank():
    code = """
        import torch
        try:
            (torch.ones(4, device="mtia") * 2).sum().item()
            print("ok")
        except RuntimeError:
            print("failed")
    """
    assert run(code, OPENMTIA_FAULTS="kernel:op=aten::mul,rank=1,times=0", RANK="0").strip() == "ok"
    assert run(code, OPENMTIA_FAULTS="kernel:op=aten::mul,rank=1,times=0", RANK="1").strip() == "failed"


@pytest.mark.parametrize("spec, message", [
    ("bogus", "OPENMTIA_FAULTS: fault 'bogus': unknown fault kind 'bogus'"),
    ("oom:after=x", "OPENMTIA_FAULTS: fault 'oom:after=x': after=x is not a count"),
    ("kernel:op", "OPENMTIA_FAULTS: fault 'kernel:op': 'op' is not key=value"),
])
def test_a_bad_openmtia_faults_is_a_clear_error_at_start_up(spec, message):
    out = run("""
        import torch
        try:
            torch.ones(1, device="mtia")
            print("no error")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
    """, OPENMTIA_FAULTS=spec)
    assert message in out, out


def test_the_reference_driver_says_it_injects_none():
    out = run("""
        import torch, openmtia.faults as faults
        try:
            faults.inject("kernel")
            print("no error")
        except RuntimeError as e:
            print(e)
        print((torch.ones(3, device="mtia") * 2).sum().item())
    """, OPENMTIA_DRIVER="reference")
    assert "the reference driver injects no faults" in out and "6.0" in out, out


# A device broken by a sticky fault or lost stays so for the rest of its
# process (as a CUDA context after a sticky error): each case runs in a
# process of its own, with two devices.
BROKEN_DEVICE = """
    import torch, openmtia.faults as faults
    a = torch.randn(64, 64, device="mtia")
    b = torch.randn(64, 64, device="mtia:1")
    expected = a.cpu() @ a.cpu()
    (a @ a).sum().item()  # (the signature's first call ran already)
    torch.randn(3, device="mtia", requires_grad=True).mul(2).sum().backward()  # (autograd's device threads: settled at exit)
    done = torch.mtia.Event()
    done.record()
    pinned = torch.ones(4096).pin_memory()
    staged = pinned.to("mtia", non_blocking=True)  # (the pinned block's free records an event on the stream)
    faults.inject(KIND, **SETTINGS)
    y = a @ a  # returns: the device faults in the kernel
    def error(f):
        try:
            f()
        except torch.AcceleratorError as e:
            return e.error_code, str(e)
        raise AssertionError("no error")
    # queued behind it, never to run; or, if the device broke already, refused at the call
    try:
        z = a + 1
        early = None
    except torch.AcceleratorError as e:
        z, early = None, (e.error_code, str(e))
    first = error(torch.mtia.synchronize)
    assert first[0] == CODE and SAYS in first[1], first
    assert early in (None, first), early
    # every later call on the device fails the same way, not once
    for call in (torch.mtia.synchronize, lambda: a + 1, lambda: a.cpu(), lambda: torch.mtia.Event().record(),
                 lambda: torch.ones(3).to("mtia"), lambda: torch.mtia.current_stream().synchronize(),
                 lambda: torch.empty(7 << 20, device="mtia"), done.query):  # (a size the cache never held: the driver's allocation)
        assert error(call) == first, error(call)
    del pinned, staged  # (a free does not fail, nor abort the process)
    torch.testing.assert_close(torch.arange(8.).pin_memory(), torch.arange(8.))
    # the other device goes on, as CPU
    torch.testing.assert_close((b @ b).cpu(), b.cpu() @ b.cpu())
    del a, y, z  # (frees do not fail)
    torch.mtia.empty_cache()
    print("ok")
"""


def test_a_sticky_kernel_fault_poisons_its_device_only():
    out = run(BROKEN_DEVICE.replace("KIND", '"kernel"').replace("SETTINGS", 'dict(op="aten::mm", sticky=True)')
              .replace("CODE", "4").replace("SAYS", '"mtia:0 is unusable: a sticky fault in \'aten::mm\' on stream 0"'),
              OPENMTIA_DEVICE_COUNT="2")
    assert out.strip().endswith("ok"), out


def test_a_lost_device_fails_every_later_call_on_it_saying_so_and_the_others_go_on():
    out = run(BROKEN_DEVICE.replace("KIND", '"lost"').replace("SETTINGS", 'dict(device=0, op="aten::mm")')
              .replace("CODE", "10").replace("SAYS", '"mtia:0 is lost (it fell off the bus in \'aten::mm\' on stream 0)"'),
              OPENMTIA_DEVICE_COUNT="2")
    assert out.strip().endswith("ok"), out


def test_a_lost_device_from_the_environment_in_an_unmodified_program():
    out = run("""
        import torch
        x = torch.ones(4, device="mtia")
        for i in range(10):
            x = x * 2  # the 3rd mul loses the device
        try:
            x.cpu()
        except torch.AcceleratorError as e:
            print(e.error_code, str(e).split(":", 1)[1].split("(")[0].strip())
    """, OPENMTIA_FAULTS="lost:op=aten::mul,after=3")
    assert out.strip() == "10 mtia:0 is lost", out


def test_a_hung_stream_blocks_its_synchronization_until_the_fault_is_cleared():
    import threading

    a = torch.ones(64, device="mtia")
    (a * 2).sum().item()
    faults.inject("hang", op="aten::mul")
    b = a * 2  # hangs the stream: nothing after it runs
    c = a + 1
    outcome = []

    def sync():
        try:
            torch.mtia.synchronize()
            outcome.append("no error")
        except torch.AcceleratorError as e:
            outcome.append(str(e))

    t = threading.Thread(target=sync)
    t.start()
    t.join(0.5)
    assert t.is_alive() and not outcome  # no timeout of its own, as CUDA's
    assert not torch.mtia.current_stream().query()
    faults.clear()  # releases it: the hung work fails, not run; the stream goes on
    t.join(10)
    assert len(outcome) == 1 and re.search(r"'aten::mul' hung mtia:0 stream \d+ until the fault was released",
                                           outcome[0]), outcome
    torch.testing.assert_close(c.cpu(), a.cpu() + 1)
    del b


def test_a_program_whose_stream_hangs_still_exits():
    out = run("""
        import torch, openmtia.faults as faults
        a = torch.ones(4, device="mtia")
        faults.inject("hang", op="aten::mul")
        b = a * 2
        print("done")
    """)
    assert out.strip() == "done", out
