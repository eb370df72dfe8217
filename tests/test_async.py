"""Ops run as tasks on the current stream: asynchronous, ordered, errors at sync."""
import os
import subprocess
import sys

import pytest
import torch

import openmtia


def hold(device=0):
    """Holds the current stream of `device` until .release()."""
    return openmtia._C._launch_blocking_task(device)


def warm(fn):
    """Runs fn once and waits: a signature's first call runs synchronously (it
    verifies the op's plan); later calls are asynchronous."""
    fn()
    torch.mtia.synchronize()


def test_first_call_of_a_signature_verifies_then_calls_are_async():
    a = torch.randn(64, 64, device="mtia")
    gate = hold()
    import threading
    threading.Timer(0.2, gate.release).start()
    a @ a  # first call of this signature: waits for the stream, runs, verifies
    assert torch.mtia.current_stream().query()
    gate = hold()
    a @ a  # now asynchronous
    assert not torch.mtia.current_stream().query()
    gate.release()


def test_ops_return_before_they_run():
    a = torch.randn(512, 512, device="mtia")
    warm(lambda: (a @ a * 2).sum(1))
    gate = hold()
    c = a @ a  # returns although the stream is held
    d = (c * 2).sum(1)
    assert c.shape == (512, 512) and d.shape == (512,)
    assert not torch.mtia.current_stream().query()
    gate.release()
    torch.mtia.synchronize()
    ac = a.cpu()
    torch.testing.assert_close(d.cpu(), ((ac @ ac) * 2).sum(1), rtol=1e-4, atol=1e-3)


def test_in_order_execution_of_many_ops():
    x = torch.zeros(1000, device="mtia")
    warm(lambda: (x.add_(0), x * 3))
    gate = hold()
    for _ in range(100):
        x.add_(1)
    y = x * 3
    gate.release()
    assert torch.equal(y.cpu(), torch.full((1000,), 300.0))


def test_streams_are_independent():
    s1, s2 = torch.Stream(device="mtia"), torch.Stream(device="mtia")
    warm(lambda: torch.arange(10.0, device="mtia") * 2)
    with torch.mtia.stream(s1):
        gate = hold()
    with torch.mtia.stream(s2):
        y = torch.arange(10.0, device="mtia") * 2
    s2.synchronize()  # completes while s1 is still held: the streams overlap
    assert not s1.query()
    assert torch.equal(y.cpu(), torch.arange(10.0) * 2)
    gate.release()
    s1.synchronize()


def test_wait_stream_orders_consumers_after_producers():
    producer = torch.Stream(device="mtia")
    warm(lambda: torch.full((100,), 5.0, device="mtia") + 1)
    with torch.mtia.stream(producer):
        gate = hold()
        x = torch.full((100,), 5.0, device="mtia")
    torch.mtia.current_stream().wait_stream(producer)
    y = x + 1  # runs after the producer's work
    gate.release()
    assert torch.equal(y.cpu(), torch.full((100,), 6.0))


def test_event_orders_work_across_streams():
    s1, s2 = torch.Stream(device="mtia"), torch.Stream(device="mtia")
    done = torch.Event(device="mtia")
    warm(lambda: torch.ones(50, device="mtia").mul_(7).sum())
    with torch.mtia.stream(s1):
        gate = hold()
        x = torch.ones(50, device="mtia").mul_(7)
        done.record()
    with torch.mtia.stream(s2):
        s2.wait_event(done)
        y = x.sum()
    assert not done.query()
    gate.release()
    with torch.mtia.stream(s2):
        assert y.item() == 350.0


def test_record_stream_keeps_memory_until_the_stream_used_it():
    side = torch.Stream(device="mtia")
    x = torch.full((1 << 16,), 3.0, device="mtia")
    warm(lambda: x.sum())
    with torch.mtia.stream(side):
        gate = hold()
        x.record_stream(side)
        total = x.sum()
    del x  # freed by the host while the side stream still has to read it
    junk = [torch.full((1 << 16,), -1.0, device="mtia") for _ in range(4)]  # would reuse it if freed
    gate.release()
    side.synchronize()
    assert total.cpu().item() == 3.0 * (1 << 16)
    del junk


def test_async_error_names_the_op_and_device_recovers():
    src = torch.randn(4, 3, device="mtia")
    bad = torch.tensor([[0, 1, 2], [7, 0, 0]], device="mtia")  # 7 is out of range
    warm(lambda: torch.gather(src, 0, torch.zeros_like(bad)))
    warm(lambda: torch.nn.functional.embedding(torch.tensor([1, 2], device="mtia"), torch.randn(5, 2, device="mtia")))
    out = torch.gather(src, 0, bad)  # returns: the check happens on the device
    with pytest.raises(RuntimeError, match="aten::gather"):
        torch.mtia.synchronize()
    emb = torch.randn(5, 2, device="mtia")
    torch.nn.functional.embedding(torch.tensor([1, 9], device="mtia"), emb)
    with pytest.raises(RuntimeError, match="index"):
        torch.mtia.synchronize()
    good = torch.gather(src, 0, torch.zeros(1, 3, dtype=torch.long, device="mtia"))
    assert torch.equal(good.cpu(), src.cpu()[:1])


def test_launch_blocking_raises_at_the_failing_op():
    code = (
        "import torch\n"
        "src = torch.randn(4, 3, device='mtia')\n"
        "torch.gather(src, 0, torch.zeros(1, 3, dtype=torch.long, device='mtia'))\n"
        "try:\n"
        "    torch.gather(src, 0, torch.tensor([[9, 0, 0]], device='mtia'))\n"
        "    print('no error at the op')\n"
        "except RuntimeError as e:\n"
        "    print('raised at the op:', 'aten::gather' in str(e))\n"
        "print(torch.ones(2, device='mtia').sum().item())\n"
    )
    env = dict(os.environ, OPENMTIA_LAUNCH_BLOCKING="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["raised at the op: True", "2.0"]


def test_data_dependent_and_scalar_ops_wait():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="mtia")
    gate = hold()
    import threading
    threading.Timer(0.2, gate.release).start()  # nonzero must wait for the stream
    assert torch.nonzero(x).cpu().flatten().tolist() == [1, 3]
    assert torch.mtia.current_stream().query()


def test_tasks_snapshot_metadata_at_launch():
    """In-place metadata changes after an op was launched do not change the op."""
    x = torch.zeros(4, 4, device="mtia")
    src = torch.arange(16.0, device="mtia").view(4, 4)
    warm(lambda: torch.ones(2, 3, device="mtia").mul_(5))
    gate = hold()
    x.copy_(src.t())     # a strided copy task
    x.resize_(16)        # ... then the host changes x's shape before it runs
    y = torch.zeros(3, 3, device="mtia")
    y.fill_(2.0)
    y.t_()
    z = torch.ones(2, 3, device="mtia")
    z.mul_(5)            # a fallback task
    z.t_()
    gate.release()
    assert torch.equal(x.cpu(), torch.arange(16.0).view(4, 4).t().reshape(16))
    assert torch.equal(y.cpu(), torch.full((3, 3), 2.0))
    assert torch.equal(z.cpu(), torch.full((3, 2), 5.0))
