"""Core ops and the CPU fallback: values, in-place, out=, views, lists, autograd."""
import pytest
import torch
import torch.nn.functional as F


def on(t, device="mtia"):
    return t.to(device)


def test_core_ops():
    x = torch.empty(3, 4, device="mtia")
    assert x.device.type == "mtia" and x.shape == (3, 4)
    y = torch.empty_strided((3, 4), (1, 3), device="mtia")
    assert y.stride() == (1, 3)
    z = torch.arange(12.0, device="mtia")
    assert torch.equal(z.view(3, 4).cpu(), torch.arange(12.0).view(3, 4))
    assert torch.equal(z.as_strided((2, 2), (1, 2), 1).cpu(), torch.arange(12.0).as_strided((2, 2), (1, 2), 1))
    assert torch.equal(z.reshape(4, 3).t().cpu(), torch.arange(12.0).reshape(4, 3).t())
    assert torch.equal(z.unfold(0, 3, 2).cpu(), torch.arange(12.0).unfold(0, 3, 2))
    z.fill_(2.5)
    assert torch.equal(z.cpu(), torch.full((12,), 2.5))
    z.zero_()
    assert z.abs().sum().item() == 0
    z.fill_(torch.tensor(4.0, device="mtia"))
    assert z[0].item() == 4.0
    assert torch.tensor([7], device="mtia").item() == 7
    c = torch.randn(3, dtype=torch.complex64)
    assert torch.equal(torch.view_as_real(c.to("mtia")).cpu(), torch.view_as_real(c))
    assert torch.equal(torch.view_as_complex(torch.view_as_real(c.to("mtia"))).cpu(), c)


def test_resize_and_set():
    x = torch.arange(4.0, device="mtia")
    x.resize_(2, 3)
    assert x.shape == (2, 3)
    assert torch.equal(x.reshape(-1)[:4].cpu(), torch.arange(4.0))  # contents kept
    x.resize_(0)
    assert x.numel() == 0
    a = torch.arange(6.0, device="mtia")
    b = torch.empty(0, device="mtia")
    b.set_(a)
    assert b.data_ptr() == a.data_ptr() and torch.equal(b.cpu(), a.cpu())
    b.set_(a.untyped_storage(), 2, (2, 2), (1, 2))
    assert torch.equal(b.cpu(), torch.arange(6.0).as_strided((2, 2), (1, 2), 2))
    b.set_()
    assert b.numel() == 0
    c = torch.empty(0, device="mtia")
    c.set_(a.untyped_storage())
    assert c.shape == (6,)
    with pytest.raises(RuntimeError, match="Attempted to set the storage of an mtia tensor to a storage on cpu"):
        torch.empty(0, device="mtia").set_(torch.arange(3.0).untyped_storage())


def test_functional_ops_match_cpu():
    torch.manual_seed(0)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    am, bm = on(a), on(b)
    for fn in [lambda x, y: x @ y, lambda x, y: torch.relu(x).sum(1),
               lambda x, y: torch.softmax(x, -1), lambda x, y: x.max(dim=1).values,
               lambda x, y: torch.cumsum(x, 0), lambda x, y: torch.sort(x, 1)[0],
               lambda x, y: torch.where(x > 0, x, -x), lambda x, y: x.argmax()]:
        assert torch.equal(fn(am, bm).cpu(), fn(a, b))


def test_inplace_returns_self_and_writes_device_memory():
    x = torch.ones(4, device="mtia")
    ptr = x.data_ptr()
    r = x.add_(2)
    assert r is x and x.data_ptr() == ptr
    assert torch.equal(x.cpu(), torch.full((4,), 3.0))
    v = x[1:3]
    v.mul_(10)  # in-place on a view changes the base
    assert torch.equal(x.cpu(), torch.tensor([3.0, 30.0, 30.0, 3.0]))
    y = torch.zeros(2, 3, device="mtia")
    y.diagonal().fill_(1)
    assert torch.equal(y.cpu(), torch.eye(2, 3))


def test_out_variants_including_resize():
    a = torch.randn(4, 4)
    out = torch.empty(4, 4, device="mtia")
    r = torch.mm(on(a), on(a), out=out)
    assert r is out and torch.allclose(out.cpu(), a @ a)
    small = torch.empty(0, device="mtia")
    torch.add(on(a), 1, out=small)  # the kernel resizes the out tensor
    assert small.shape == (4, 4) and torch.equal(small.cpu(), a + 1)
    assert small.device == torch.device("mtia:0")
    vals, idx = torch.empty(0, device="mtia"), torch.empty(0, dtype=torch.long, device="mtia")
    torch.max(on(a), 1, out=(vals, idx))
    ev, ei = torch.max(a, 1)
    assert torch.equal(vals.cpu(), ev) and torch.equal(idx.cpu(), ei)


def test_view_ops_through_the_fallback_alias_memory():
    x = torch.arange(12.0, device="mtia")
    d = torch.diagonal(x.view(3, 4))
    d.fill_(-1)
    assert x[0].item() == -1 and x[5].item() == -1
    parts = torch.split(x, 5)
    parts[1].zero_()
    assert x[5:10].abs().sum().item() == 0
    chunks = x.view(3, 4).unbind(0)
    assert all(c.device.type == "mtia" for c in chunks)


def test_tensor_lists_optional_tensors_and_scalars():
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(torch.cat([on(a), on(b)]).cpu(), torch.cat([a, b]))
    assert torch.equal(torch.stack([on(a), on(b)], 1).cpu(), torch.stack([a, b], 1))
    w = torch.randn(3)
    assert torch.allclose(F.layer_norm(on(a), (3,), on(w), None).cpu(), F.layer_norm(a, (3,), w, None))
    assert on(a).equal(on(a)) and not on(a).equal(on(b))
    assert on(a).sum().item() == pytest.approx(a.sum().item())
    idx = torch.tensor([1, 0])
    assert torch.equal(on(a)[on(idx)].cpu(), a[idx])
    assert torch.equal(on(a)[idx].cpu(), a[idx])  # CPU indices are accepted, as on CUDA
    m = a > 0
    assert torch.equal(on(a)[on(m)].cpu(), a[m])
    t = on(a.clone())
    t[on(idx), 1] = 5.0
    ref = a.clone()
    ref[idx, 1] = 5.0
    assert torch.equal(t.cpu(), ref)
    assert torch.equal(torch.nonzero(on(m)).cpu(), torch.nonzero(m))


def test_factories_on_mtia():
    assert torch.equal(torch.arange(5, device="mtia").cpu(), torch.arange(5))
    assert torch.equal(torch.linspace(0, 1, 5, device="mtia").cpu(), torch.linspace(0, 1, 5))
    assert torch.equal(torch.eye(3, device="mtia:1").cpu(), torch.eye(3))
    assert torch.full((2,), 7, device="mtia:1").device == torch.device("mtia:1")
    assert torch.randperm(10, device="mtia").sort().values.cpu().tolist() == list(range(10))
    assert torch.tensor([1, 2], device="mtia").dtype == torch.int64


def test_all_dtypes_round_trip_through_ops():
    for dt in [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]:
        x = torch.ones(3, dtype=dt)
        y = on(x).clone()
        assert y.dtype == dt and torch.equal(y.cpu(), x)


def test_autograd_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model_m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model_m.load_state_dict(model.state_dict())
    model_m.to("mtia")
    x = torch.randn(4, 8)
    model(x).pow(2).mean().backward()
    model_m(on(x)).pow(2).mean().backward()
    for p, pm in zip(model.parameters(), model_m.parameters()):
        assert pm.grad.device.type == "mtia"
        assert torch.allclose(pm.grad.cpu(), p.grad, atol=1e-6)
    leaf = torch.randn(3, device="mtia", requires_grad=True)
    (leaf.exp() * 2).sum().backward()
    assert torch.allclose(leaf.grad.cpu(), 2 * leaf.detach().cpu().exp())


def test_ops_follow_the_current_device():
    with torch.mtia.device(1):
        x = torch.randn(4, 4, device="mtia")
        assert (x @ x).device == torch.device("mtia:1")
    y = x.sum()
    assert y.device == torch.device("mtia:1")


def test_no_op_uses_a_composite_kernel_where_cpu_has_its_own():
    """An op with both a CPU kernel and a CompositeExplicitAutograd(NonFunctional)
    kernel must have an mtia kernel (else mtia would run a different
    implementation than CPU)."""
    missing = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        lines = torch._C._dispatch_dump(name).split("\n")
        has = lambda key: any(line.startswith(key) for line in lines)
        composite = has("CompositeExplicitAutograd[alias]") or has("CompositeExplicitAutogradNonFunctional[alias]")
        if has("CPU:") and composite and not has("MTIA:"):
            missing.append(name)
    assert missing == []


def test_low_precision_norms_equal_cpu_bitwise():
    torch.manual_seed(0)
    x = torch.randn(4, 6, 3, dtype=torch.bfloat16)
    for a, b in zip(torch.native_group_norm(x, None, None, 4, 6, 3, 2, 0.5),
                    torch.native_group_norm(x.to("mtia"), None, None, 4, 6, 3, 2, 0.5)):
        assert torch.equal(a, b.cpu())
    w = torch.randn(3, dtype=torch.bfloat16)
    assert torch.equal(F.layer_norm(x, (3,), w).cpu(), F.layer_norm(x.to("mtia"), (3,), w.to("mtia")).cpu())
    assert torch.equal(torch.nn.functional.conv1d(x, torch.ones(2, 6, 2, dtype=torch.bfloat16)),
                       torch.nn.functional.conv1d(x.to("mtia"), torch.ones(2, 6, 2, dtype=torch.bfloat16, device="mtia")).cpu())


def test_efficient_zero_tensor_gradients():
    x = torch.randn(5, device="mtia", requires_grad=True)
    g, = torch.autograd.grad(torch.sgn(x).sum(), [x])  # sgn's backward returns efficient zeros
    assert g.device.type == "mtia" and torch.equal(g.cpu(), torch.zeros(5))


def test_losses_run_without_resize_warnings(recwarn):
    import warnings

    warnings.simplefilter("always")
    a, b = torch.randn(64, 32, device="mtia"), torch.randn(64, 32, device="mtia")
    for _ in range(2):  # first call verifies the plan, the second runs asynchronously
        for fn in (F.mse_loss, F.smooth_l1_loss, F.l1_loss, F.huber_loss):
            assert torch.allclose(fn(a, b).cpu(), fn(a.cpu(), b.cpu()))
    torch.mtia.synchronize()
    assert not [w for w in recwarn if "resized" in str(w.message)]


def test_python_numbers_keep_their_type_promotion_in_async_ops():
    # int64 * 1.1 computes in float32 on CPU (the number is a "wrapped number");
    # run in float64 and then cast, the last bit differs
    x = torch.tensor([16777217, 3, 123456789], dtype=torch.int64)
    for _ in range(2):  # the first call of a signature and the asynchronous ones
        assert torch.equal((x.to("mtia") * 1.1).cpu(), x * 1.1)
        assert torch.equal((x.to("mtia") + 0.7).cpu(), x + 0.7)


@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div, torch.fmod, torch.remainder,
                                torch.copysign, torch.special.chebyshev_polynomial_t])
def test_a_python_number_and_a_0_dim_cpu_tensor_are_different_signatures(op):
    # a plan made for `b op 1.0` (a wrapped Python number: float32 result)
    # must not serve `b op tensor(1.0, float64)` (a 0-dim tensor: float64 on CPU)
    b = torch.randint(1, 9, (5,), device="mtia")
    bc = b.cpu()
    for _ in range(2):  # the signatures' first calls and planned ones
        for other in (1.0, torch.tensor(1.0, dtype=torch.float64), 2, torch.tensor(2, dtype=torch.int16)):
            got, want = op(b, other), op(bc, other)
            assert got.dtype == want.dtype, (op, other)
            torch.testing.assert_close(got.cpu(), want)


def test_fill_of_a_tensor_with_overlapping_elements_like_cpu():
    # CPU's (and CUDA's) fill_ writes one value through a stride of 0, from a
    # number or a tensor on another device; a value on self's device is copied
    # (copy_ rejects the overlap, on CPU as here)
    def strided(device):
        return torch.empty_strided((4, 3, 2), (10, 0, 3), device=device)
    for fill in (lambda t: t.fill_(1.5), lambda t: t.zero_()):
        want = fill(strided("cpu"))
        got = fill(strided("mtia"))
        assert torch.equal(got.cpu(), want)
    got = strided("mtia").fill_(torch.tensor(2.5))  # a CPU value for an mtia self: its number
    assert torch.equal(got.cpu(), strided("cpu").fill_(2.5))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
        strided("cpu").fill_(torch.tensor(3.0))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
        strided("mtia").fill_(torch.tensor(3.0, device="mtia"))


def test_composite_kernels_that_call_a_dispatch_stub_run_cpus_kernel():
    # conj_physical_'s only dense kernel is CompositeExplicitAutograd, which
    # calls conj_physical_stub for the tensor's device: "DispatchStub: missing
    # kernel for mtia" before; torch.svd(out=) of complex input calls it
    x = torch.randn(5, dtype=torch.complex64)
    m = x.to("mtia")
    m.conj_physical_()
    assert torch.equal(m.cpu(), x.conj_physical())
    a = torch.randn(4, 3, dtype=torch.complex128)
    u, s, v = torch.svd(a)
    outs = tuple(torch.empty_like(t, device="mtia") for t in (u, s, v))
    torch.svd(a.to("mtia"), out=outs)
    for got, want in zip(outs, (u, s, v)):
        torch.testing.assert_close(got.cpu(), want)


def test_empty_complex_random_out_compares_equal():
    from torch.testing._internal.common_utils import TestCase
    a = torch.rand(0, 0, dtype=torch.complex128, device="mtia")
    out = torch.empty(0, 0, dtype=torch.complex128, device="mtia")
    torch.rand((0, 0), out=out)
    TestCase().assertEqual(a, out)
    assert a.dtype == out.dtype == torch.complex128 and a.shape == out.shape == (0, 0)


def test_complex32_arithmetic_with_python_numbers_equals_cpu_bitwise():
    import warnings
    warnings.simplefilter("ignore")  # ComplexHalf is experimental
    torch.manual_seed(0)
    x = torch.randn(6, dtype=torch.complex64).to(torch.complex32)
    m = x.to("mtia")
    for s in (1.5, 2.5 + 1j, -1j, 3, 0.5 - 0.25j, 1e4 + 1e4j):
        for alpha in (1, 2, 0.5):
            for f in (torch.sub, torch.add):
                want, got = f(x, s, alpha=alpha), f(m, s, alpha=alpha).cpu()
                assert got.dtype == want.dtype == torch.complex32
                assert torch.equal(torch.view_as_real(got), torch.view_as_real(want)), (f, s, alpha)
        want, got = x - s, (m - s).cpu()
        assert torch.equal(torch.view_as_real(got), torch.view_as_real(want)), s


@pytest.mark.parametrize("name", ["fmod", "remainder"])
def test_fmod_and_remainder_equal_cpu_on_extremal_large_and_small_values(name):
    import torch.testing._internal.opinfo.core as core
    from torch.testing._internal.common_methods_invocations import op_db
    op = next(o for o in op_db if o.name == name)
    n = 0
    for gen in (core.generate_elementwise_binary_extremal_value_tensors,
                core.generate_elementwise_binary_large_value_tensors,
                core.generate_elementwise_binary_small_value_tensors,
                core.generate_elementwise_binary_tensors):
        for s in gen(op, device="cpu", dtype=torch.float32, requires_grad=False):
            a, b = s.input, s.args[0]
            want = op(a, b)
            for _ in range(2):  # a first call, then a planned one
                got = op(a.to("mtia"), b.to("mtia")).cpu()
                torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
            n += 1
    assert n >= 10
    # a large shape (vectorized loops, scalar tails, every kernel thread) with
    # extremal values mixed in: ±0, tiny, subnormal, huge, ±inf, NaN
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1e-38, 1e-45, -1e-45, 3e38, -3e38, float("inf"), float("-inf"), float("nan"),
                            1.0, -1.0, 7.5, -7.5])
    def mixed():
        x = torch.randn(1031, 915, generator=g) * torch.logspace(-20, 20, 915)
        pick = torch.rand(1031, 915, generator=g) < 0.1
        return torch.where(pick, special[torch.randint(0, len(special), (1031, 915), generator=g)], x)
    a, b = mixed(), mixed()
    want = op(a, b)
    for _ in range(2):
        torch.testing.assert_close(op(a.to("mtia"), b.to("mtia")).cpu(), want, equal_nan=True, atol=0, rtol=0)


def test_pow_of_half_by_a_complex_number_raises_like_cpu():
    # CPU's pow kernel has no ComplexHalf (the result dtype of half ** complex):
    # CPU raises, and mtia, which runs CPU's kernel, raises the same at the call
    x = torch.randn(4, dtype=torch.half)
    for f in (lambda t: torch.pow(t, 2.5j), lambda t: t ** 2.5j, lambda t: torch.pow(2.5j, t)):
        with pytest.raises(NotImplementedError, match="\"pow\" not implemented for 'ComplexHalf'"):
            f(x)
        with pytest.raises(NotImplementedError, match="\"pow\" not implemented for 'ComplexHalf'"):
            f(x.to("mtia"))
    assert (x.to("mtia") + 1).sum().item() == pytest.approx((x + 1).sum().item())  # usable after
