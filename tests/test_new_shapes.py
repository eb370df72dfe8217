"""New shapes cost what the op costs (issue 18, point 2).

A signature's first call runs synchronously on the real data, once. For a
structured op, a new shape of a known family (the signature without sizes and
strides: dtypes, devices, ranks, aliasing, number classes) is planned by the
op's C++ meta function, the CPU kernel's own argument check, and runs
asynchronously: the call returns before the op has run, its argument errors
still raise at the call, its device-data errors at the next sync. (The ops
here are boxed-fallback ops: small pointwise ops of csrc/aten/pointwise.cpp's
unboxed path have no plans.)
"""
import subprocess
import sys
import textwrap

import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)


def stats():
    return openmtia._C._plan_cache_stats()


def hold():
    """Holds the current stream of mtia:0 until .release() (or 10 s)."""
    return openmtia._C_test.launch_blocking_task(0, 10.0)


@pytest.mark.needs_async
def test_a_new_shape_of_a_known_family_returns_before_it_runs_with_cpus_values():
    a, b = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    first = stats()
    got = torch.logaddexp(a.to("mtia"), b.to("mtia"))  # a new family: its first call runs at the call
    assert torch.mtia.current_stream().query()
    assert stats()["first_calls"] == first["first_calls"] + 1
    for shape in [(6, 9), (1, 13), (40, 3)]:
        a2, b2 = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
        ma, mb = a2.to("mtia"), b2.to("mtia")
        torch.mtia.synchronize()
        before = stats()
        gate = hold()
        try:
            out = torch.logaddexp(ma, mb)  # a new shape: planned, queued behind the held stream
            assert not torch.mtia.current_stream().query()
            assert out.shape == shape and out.dtype == torch.float64
        finally:
            gate.release()
        after = stats()
        assert after["first_calls"] == before["first_calls"]
        assert after["shape_calls"] == before["shape_calls"] + 1
        assert torch.equal(out.cpu(), torch.logaddexp(a2, b2))
    assert torch.equal(got.cpu(), torch.logaddexp(a, b))


def test_a_new_shape_takes_cpus_strides_and_broadcasting():
    x = torch.randn(4, 5, dtype=torch.float64)
    (x.to("mtia").t() * torch.tensor(2.0, dtype=torch.float64, device="mtia")).cpu()
    for shape in [(6, 7), (9, 2)]:
        x = torch.randn(shape, dtype=torch.float64)
        s = torch.tensor(2.0, dtype=torch.float64)
        before = stats()["shape_calls"]
        got = x.to("mtia").t() * s.to("mtia")  # a transposed input: CPU's output strides follow it
        want = x.t() * s
        assert stats()["shape_calls"] == before + 1
        assert got.stride() == want.stride() and torch.equal(got.cpu(), want)


@pytest.mark.needs_async
def test_a_new_shape_of_matmul_runs_once_asynchronously():
    torch.randn(3, 4, device="mtia") @ torch.randn(4, 5, device="mtia")
    torch.mtia.synchronize()
    a, b = torch.randn(301, 67), torch.randn(67, 129)
    ma, mb = a.to("mtia"), b.to("mtia")
    torch.mtia.synchronize()
    gate = hold()
    try:
        out = ma @ mb
        assert not torch.mtia.current_stream().query()
    finally:
        gate.release()
    torch.testing.assert_close(out.cpu(), a @ b)


def cases_at_the_call():
    """(a call that makes the family known, a new shape of it that is invalid,
    exception, message): shape errors the meta function raises."""
    d = torch.float64
    m = lambda *s: torch.randn(*s, dtype=d, device="mtia")  # noqa: E731
    x = m(64)
    return [
        ("mm", lambda: m(3, 4) @ m(4, 6), lambda: m(3, 4) @ m(5, 6), RuntimeError,
         r"mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x6\)"),
        ("broadcast", lambda: torch.logaddexp(m(3, 4), m(3, 4)), lambda: torch.logaddexp(m(3, 4), m(5, 4)),
         RuntimeError, r"The size of tensor a \(3\) must match the size of tensor b \(5\)"),
        ("in-place", lambda: m(3, 4).xlogy_(m(3, 4)), lambda: m(3, 4).xlogy_(m(3, 5)), RuntimeError,
         r"The size of tensor a \(4\) must match the size of tensor b \(5\)"),
        ("in-place broadcast", lambda: m(3, 4).addcmul_(m(1, 4), m(1, 4)),
         lambda: m(3, 4).addcmul_(m(2, 4), m(2, 4)), RuntimeError,
         r"The size of tensor a \(3\) must match the size of tensor b \(2\)"),
        # one storage, the same offsets: whether the views overlap depends on their sizes
        ("in-place partial overlap", lambda: x[16:24].copysign_(x[0:8]), lambda: x[16:40].copysign_(x[0:24]),
         RuntimeError, "unsupported operation"),
    ]


@pytest.mark.parametrize("case", [c[0] for c in cases_at_the_call()])
def test_argument_errors_of_a_new_shape_raise_at_the_call(case):
    name, known, invalid, exc, pattern = next(c for c in cases_at_the_call() if c[0] == case)
    known()
    torch.mtia.synchronize()
    for _ in range(2):
        with pytest.raises(exc, match=pattern):  # a task-time error would come only at the sync below
            invalid()
        torch.mtia.synchronize()  # nothing left behind
    assert torch.ones(2, device="mtia").sum().item() == 2


def test_a_family_not_implemented_for_a_dtype_raises_at_the_call_at_every_shape():
    for n in (3, 5, 8):
        with pytest.raises(NotImplementedError, match="floor is not supported for complex"):
            torch.floor(torch.randn(n, 2, dtype=torch.complex64, device="mtia"))
        torch.mtia.synchronize()


def test_empty_tensors_do_not_make_a_family_known():
    # a kernel may return before its dtype checks when there is nothing to do
    torch.logaddexp2(torch.empty(0, 3, dtype=torch.float64, device="mtia"),
                     torch.empty(0, 3, dtype=torch.float64, device="mtia"))
    before = stats()
    a, b = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    got = torch.logaddexp2(a.to("mtia"), b.to("mtia"))
    assert stats()["first_calls"] == before["first_calls"] + 1
    assert stats()["shape_calls"] == before["shape_calls"]
    assert torch.equal(got.cpu(), torch.logaddexp2(a, b))


def test_index_errors_of_a_new_shape_raise_at_the_next_sync_naming_the_op():
    src = torch.randn(4, 6, device="mtia")
    torch.gather(src, 1, torch.tensor([[0, 1]] * 4, device="mtia"))
    torch.mtia.synchronize()
    src = torch.randn(5, 7, device="mtia")
    bad = torch.tensor([[0, 9]] * 5, device="mtia")  # the values live on the device
    before = stats()["shape_calls"]
    y = torch.gather(src, 1, bad)  # as CUDA's device-side assert: not known at the call
    assert stats()["shape_calls"] == before + 1
    with pytest.raises(RuntimeError, match=r"asynchronous task 'aten::gather' failed.*index 9 is out of bounds"):
        torch.mtia.synchronize()
    del y
    assert torch.ones(2, device="mtia").sum().item() == 2


def test_planning_a_new_shape_runs_no_python():
    # torch's Python meta kernels import torch._dynamo (~150 MiB) on their
    # first call; the fallback plans with the C++ meta functions
    code = textwrap.dedent("""
        import sys, torch, openmtia
        assert "torch._dynamo" not in sys.modules
        for n in range(1, 40):
            a, b = torch.randn(n, 16, device="mtia"), torch.randn(16, 8, device="mtia")
            # (ops the unboxed path does not take at these sizes: small gelu, softmax and sum it does)
            torch.nn.functional.layer_norm(torch.nn.functional.softplus(a @ b).flip(0), (8,))
        torch.mtia.synchronize()
        s = openmtia._C._plan_cache_stats()
        assert s["shape_calls"] > 100, s
        assert "torch._dynamo" not in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


SAMPLERS = [
    ("normal_", lambda t, g: t.normal_(0.5, 2.0, generator=g)),
    ("uniform_", lambda t, g: t.uniform_(-1.0, 3.0, generator=g)),
    ("bernoulli_", lambda t, g: t.bernoulli_(0.3, generator=g)),
    ("exponential_", lambda t, g: t.exponential_(1.5, generator=g)),
    ("random_", lambda t, g: t.random_(0, 10, generator=g)),
]


@pytest.mark.needs_async
@pytest.mark.parametrize("name", [s[0] for s in SAMPLERS])
def test_a_new_shape_of_an_in_place_sampler_is_asynchronous_and_draws_as_a_first_call(name):
    # an in-place sampler's checks are of its numbers and dtype (in the family
    # key), never of shapes: a known family's new shape queues without a first
    # call, and draws what a first call would have drawn from the same state
    draw = next(s[1] for s in SAMPLERS if s[0] == name)
    g = torch.Generator(device="mtia")
    shapes = [(5, 3), (17,), (33, 2), (1000,)]

    def draws(known):
        openmtia._C._clear_plan_cache()
        if known:
            for shape in [(4, 4), (4,)]:  # makes the families known (a family keeps its rank)
                draw(torch.empty(shape, device="mtia"), g)
        g.manual_seed(7)
        out, firsts, queued = [], 0, 0
        for shape in shapes:
            t = torch.empty(shape, device="mtia")
            torch.mtia.synchronize()
            before = stats()
            if known:  # (a first call waits for the stream: it cannot be held then)
                gate = hold()
                try:
                    r = draw(t, g)
                    queued += not torch.mtia.current_stream().query()
                finally:
                    gate.release()
            else:
                openmtia._C._clear_plan_cache()  # each a first call
                r = draw(t, g)
            assert r is t
            firsts += stats()["first_calls"] - before["first_calls"]
            out.append(t.cpu())
        return out, firsts, queued

    known, known_firsts, known_queued = draws(True)
    fresh, fresh_firsts, _ = draws(False)
    assert (known_firsts, known_queued) == (0, len(shapes))  # every new shape queued, none ran at the call
    assert fresh_firsts == len(shapes)
    for a, b in zip(known, fresh):
        assert torch.equal(a, b)
    big = known[-1]
    assert big.isfinite().all() and big.unique().numel() > 1


def test_argument_errors_of_a_samplers_new_shape_raise_at_the_call():
    torch.empty(3, device="mtia").normal_(0.0, 1.0)
    torch.empty(3, dtype=torch.uint8, device="mtia").random_(0, 200)
    torch.empty(3, device="mtia").uniform_(0.0, 1.0)
    torch.mtia.synchronize()
    for n in (5, 9):  # new shapes of known families, with numbers CPU rejects
        with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
            torch.empty(n, device="mtia").normal_(0.0, -1.0)
        with pytest.raises(RuntimeError, match="to - 1 is out of bounds for unsigned char"):
            torch.empty(n, dtype=torch.uint8, device="mtia").random_(0, 300)
        with pytest.raises(RuntimeError, match="uniform_ expects to return a \\[from, to\\) range, but found from=2"):
            torch.empty(n, device="mtia").uniform_(2.0, 1.0)
        torch.mtia.synchronize()  # nothing left behind
    assert torch.ones(2, device="mtia").sum().item() == 2
