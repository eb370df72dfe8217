"""Ops run as tasks on the current stream: asynchronous, ordered, errors at sync."""
import os
import subprocess
import sys

import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)


def hold(device=0):
    """Holds the current stream of `device` until .release()."""
    return openmtia._C_test.launch_blocking_task(device)


def warm(fn):
    """Runs fn once and waits: a signature's first call runs synchronously (it
    verifies the op's plan); later calls are asynchronous."""
    fn()
    torch.mtia.synchronize()


def released_soon(gate, after_s=0.2):
    """Releases the gate after a while: a call that waits for the stream returns then."""
    import threading
    threading.Timer(after_s, gate.release).start()


def first_calls():
    return openmtia._C._plan_cache_stats()["first_calls"]


@pytest.mark.needs_async
@pytest.mark.parametrize("case", ["structured", "not_structured", "bf16_statistics"])
def test_a_signatures_first_call_runs_once_on_the_real_data_then_later_calls_are_async(case):
    # the first call of a signature waits for the stream and runs the CPU
    # kernel on the real data, once (no dry run, no host copy of the
    # arguments); what it did becomes the signature's plan, so later calls
    # return before they run, with CPU's results (dtypes included: bfloat16
    # layer_norm's saved statistics are float32 on CPU)
    a = torch.randn(64, 48 + ["structured", "not_structured", "bf16_statistics"].index(case), device="mtia")
    x = torch.randn(4, 6, 3, dtype=torch.bfloat16, device="mtia")
    # (ops the unboxed path does not take: softmax and index_select of small
    # tensors it does)
    fn = {"structured": lambda: torch.nn.functional.softplus(a * 0.5),
          "not_structured": lambda: torch.flip(a, [0]),
          "bf16_statistics": lambda: torch.ops.aten.native_layer_norm(x, (3,), None, None, 1e-5)}[case]
    ref = {"structured": lambda: torch.nn.functional.softplus(a.cpu() * 0.5),
           "not_structured": lambda: torch.flip(a.cpu(), [0]),
           "bf16_statistics": lambda: torch.ops.aten.native_layer_norm(x.cpu(), (3,), None, None, 1e-5)}[case]
    torch.mtia.synchronize()
    openmtia._C._clear_plan_cache()  # (a structured op's known family would plan a new shape: test_new_shapes.py)
    n = first_calls()
    gate = hold()
    released_soon(gate)
    first = fn()  # waits for the stream, then runs (a * 0.5 takes the unboxed path: no plan)
    assert torch.mtia.current_stream().query()
    assert first_calls() == n + 1
    gate = hold()
    second = fn()  # asynchronous
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert first_calls() == n + 1
    for got in (first, second):
        got, want = (list(got), list(ref())) if isinstance(got, tuple) else ([got], [ref()])
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.stride() == w.stride()
            assert torch.equal(g.cpu(), w)


def test_new_offsets_and_new_float_values_are_not_new_signatures():
    # rows of a tensor (views at other storage offsets) and a float that
    # changes every call (a learning rate) share one plan: one first call
    # (offsets of views of one storage in one call stay in it: they decide overlaps)
    x, w = torch.rand(64, 32, device="mtia"), torch.randn(64, 32, device="mtia")
    torch.mtia.synchronize()
    n = first_calls()
    # (ops of the boxed fallback: small unary ops and add/sub/mul/div take pointwise.cpp's unboxed path)
    rows = [torch.special.i0e(x[i]) for i in range(64)]
    ys = [torch.lerp(x[i], w[i], 1e-3 * (1 + i)) for i in range(32)]
    torch.mtia.synchronize()
    assert first_calls() == n + 2
    xc, wc = x.cpu(), w.cpu()
    assert torch.equal(torch.stack(rows).cpu(), torch.special.i0e(xc))
    assert torch.equal(torch.stack(ys).cpu(), torch.stack([torch.lerp(xc[i], wc[i], 1e-3 * (1 + i))
                                                          for i in range(32)]))
    torch.add(x[0], x[1], out=x[2])  # views of one storage: their offsets are part of the signature
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                           "written-to tensor refer to a single memory location"):
        torch.add(x[0], x[1], out=x.view(-1)[16:48])  # overlaps x[0] partly: raises at the call, as on CPU


def test_a_float_argument_checked_by_the_kernel_raises_at_the_call_for_any_value():
    # the class of a float is part of the signature: a value the kernel
    # rejects is a new signature, whose first call runs on the host
    x = torch.rand(16, device="mtia")
    torch.mtia.synchronize()
    x.bernoulli_(0.5)
    for p in (1.5, -0.5, float("nan")):
        with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
            torch.empty(16, device="mtia").bernoulli_(p)
    torch.mtia.synchronize()
    assert set(x.bernoulli_(0.25).cpu().tolist()) <= {0.0, 1.0}


# openmtia_test::double_a/double_b: ops with a C++ CPU kernel (x * 2) that the
# tests give meta kernels disagreeing with it.
torch.library.register_fake("openmtia_test::double_a")(lambda x: x.new_empty(x.shape[::-1]).t())  # column-major
torch.library.register_fake("openmtia_test::double_b")(lambda x: x.new_empty(x.shape[0] + 1))  # wrong shape
double_colmajor = torch.ops.openmtia_test.double_a
double_wrong_shape = torch.ops.openmtia_test.double_b


def test_ops_with_a_python_cpu_kernel_run_on_the_calling_thread():
    # (on the worker they would wait for the GIL the host holds)
    @torch.library.custom_op("openmtia_test::py_double", mutates_args=(), device_types="cpu")
    def py_double(x: torch.Tensor) -> torch.Tensor:
        return x * 2
    x = torch.randn(6, device="mtia")
    for _ in range(3):
        y = py_double(x)
    torch.mtia.synchronize()
    assert torch.equal(y.cpu(), x.cpu() * 2)


@pytest.mark.needs_async
def test_cpu_scalar_tensors_next_to_mtia_tensors_run_async():
    # copysign's meta kernel (a Python reference) rejects a CPU scalar next to
    # a device tensor, which the CPU kernel (and CUDA) accepts
    x = torch.randn(16, device="mtia")
    warm(lambda: (torch.copysign(x, torch.tensor(-1.0)), torch.copysign(x, torch.tensor(1))))
    gate = openmtia._C_test.launch_blocking_task(0, 2.0)  # a synchronous op would wait out the timeout
    y = torch.copysign(x, torch.tensor(-1.0))
    z = torch.copysign(x, torch.tensor(1))  # an int64 scalar: the result stays float32
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert torch.equal(y.cpu(), torch.copysign(x.cpu(), torch.tensor(-1.0)))
    assert z.dtype == torch.float32 and torch.equal(z.cpu(), x.cpu().abs())


@pytest.mark.needs_async
def test_plans_take_the_cpu_kernels_strides():
    x = torch.randn(5, 3, device="mtia")
    first = double_colmajor(x)  # its meta kernel says column-major; the CPU kernel's result is row-major
    torch.mtia.synchronize()
    gate = hold()
    second = double_colmajor(x)  # asynchronous, with the CPU kernel's strides
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert first.stride() == second.stride() == (3, 1)
    assert torch.equal(second.cpu(), x.cpu() * 2)


@pytest.mark.needs_async
def test_plans_come_from_the_cpu_kernel_not_a_contradicting_meta_kernel():
    x = torch.randn(4, device="mtia")
    torch.mtia.synchronize()
    y = double_wrong_shape(x)  # its meta kernel says (5,): the CPU kernel's (4,) counts
    assert y.shape == (4,) and torch.equal(y.cpu(), x.cpu() * 2)
    gate = hold()
    y = double_wrong_shape(x)  # asynchronous, with the CPU kernel's shape
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert y.shape == (4,) and torch.equal(y.cpu(), x.cpu() * 2)


@pytest.mark.needs_async
def test_random_ops_are_async_and_follow_program_order():
    def draws():
        return [torch.rand(100, device="mtia"), torch.randn(3, 5, device="mtia"),
                torch.empty(50, device="mtia").normal_(), torch.randint(0, 9, (20,), device="mtia"),
                torch.nn.functional.dropout(torch.ones(64, device="mtia"), 0.5),
                torch.bernoulli(torch.full((30,), 0.3, device="mtia")), torch.randperm(40, device="mtia"),
                torch.multinomial(torch.ones(10, device="mtia"), 4)]
    torch.mtia.manual_seed(5)
    warm(draws)
    torch.mtia.manual_seed(5)
    expected = [t.cpu() for t in draws()]
    torch.mtia.manual_seed(5)
    gate = hold()
    got = draws()  # enqueued behind the held stream: no op waits
    assert not torch.mtia.current_stream().query()
    gate.release()
    for g, e in zip(got, expected):
        assert torch.equal(g.cpu(), e)


def test_kernels_allocate_their_results_in_the_device_outputs():
    # non-structured ops (conv, norms, embedding, foreach, ...) compute straight
    # into the device outputs: no task copies a result ("host staging")
    F = torch.nn.functional
    x = torch.randn(4, 3, 10, 10, device="mtia", requires_grad=True)
    w = torch.randn(5, 3, 3, 3, device="mtia", requires_grad=True)
    h = torch.randn(16, 32, device="mtia", requires_grad=True)
    ln, bn = torch.nn.LayerNorm(32).to("mtia"), torch.nn.BatchNorm2d(3).to("mtia")
    gn, emb = torch.nn.GroupNorm(1, 3).to("mtia"), torch.nn.Embedding(50, 8).to("mtia")
    idx = torch.randint(0, 16, (12,), device="mtia")
    target = torch.randint(0, 32, (16,), device="mtia")
    ps = [torch.rand(7, device="mtia") for _ in range(3)]

    def step():
        F.conv2d(x, w, padding=1).sum().backward()
        ln(h).sum().backward()
        bn(x).sum().backward()
        gn(x).sum().backward()
        emb(idx).sum().backward()
        q = h.view(2, 2, 4, 32)
        F.scaled_dot_product_attention(q, q, q).sum().backward()
        F.cross_entropy(h, target).backward()
        torch._foreach_sqrt(ps)
        torch.index_select(h, 0, idx)
        torch.stack([h, h])
    warm(step)
    before = openmtia._C._staged_result_count()
    step()
    torch.mtia.synchronize()
    assert openmtia._C._staged_result_count() == before
    # and the values are CPU's
    xc, wc = x.detach().cpu(), w.detach().cpu()
    torch.testing.assert_close(F.conv2d(x, w, padding=1).cpu(), F.conv2d(xc, wc, padding=1))


@pytest.mark.needs_async
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


@pytest.mark.needs_async
def test_in_order_execution_of_many_ops():
    x = torch.zeros(1000, device="mtia")
    warm(lambda: (x.add_(0), x * 3))
    gate = hold()
    for _ in range(100):
        x.add_(1)
    y = x * 3
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert torch.equal(y.cpu(), torch.full((1000,), 300.0))


@pytest.mark.needs_async
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


@pytest.mark.needs_async
def test_wait_stream_orders_consumers_after_producers():
    producer = torch.Stream(device="mtia")
    warm(lambda: torch.full((100,), 5.0, device="mtia") + 1)
    with torch.mtia.stream(producer):
        gate = hold()
        x = torch.full((100,), 5.0, device="mtia")
    torch.mtia.current_stream().wait_stream(producer)
    y = x + 1  # runs after the producer's work
    assert not producer.query() and not torch.mtia.current_stream().query()
    gate.release()
    assert torch.equal(y.cpu(), torch.full((100,), 6.0))


@pytest.mark.needs_async
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
    assert not done.query() and not s1.query() and not s2.query()
    gate.release()
    with torch.mtia.stream(s2):
        assert y.item() == 350.0


@pytest.mark.needs_async
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
    assert not side.query()
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


@pytest.mark.needs_async
def test_data_dependent_and_scalar_ops_wait():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="mtia")
    gate = hold()
    import threading
    threading.Timer(0.2, gate.release).start()  # nonzero must wait for the stream
    assert torch.nonzero(x).cpu().flatten().tolist() == [1, 3]
    assert torch.mtia.current_stream().query()


@pytest.mark.needs_async
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
    assert not torch.mtia.current_stream().query()
    gate.release()
    assert torch.equal(x.cpu(), torch.arange(16.0).view(4, 4).t().reshape(16))
    assert torch.equal(y.cpu(), torch.full((3, 3), 2.0))
    assert torch.equal(z.cpu(), torch.full((3, 2), 5.0))


@pytest.mark.needs_async
def test_a_gate_not_released_in_time_fails_the_test_that_held_it():
    # a test gate opens after its timeout (nothing hangs), but its task fails:
    # the sync that follows raises, so a test that relied on the hold fails
    gate = openmtia._C_test.launch_blocking_task(0, 0.2)
    with pytest.raises(RuntimeError, match="test gate not released within"):
        torch.mtia.synchronize()
    gate.release()
    assert torch.ones(3, device="mtia").sum().item() == 3.0  # the device is usable after it
