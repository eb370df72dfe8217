"""The unboxed launch path of add/sub/mul/div (csrc/pointwise.cpp): CPU's
results bit for bit, asynchronous, and the boxed fallback for every other call."""
import pytest
import torch

import openmtia

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def special_values(n, dtype):
    x = torch.randn(n, dtype=dtype) * 10 ** torch.randint(-40, 40, (n,)).to(dtype)
    vals = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-310, -1e-45, 3.4e38], dtype=dtype)
    x[: min(n, len(vals))] = vals[: min(n, len(vals))]
    return x


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 64, 1000, 32768])
def test_the_unboxed_path_equals_cpu_bit_for_bit(op, dtype, n):
    a, b = special_values(n, dtype), special_values(n, dtype).flip(0)
    expected = OPS[op](a, b)
    got = OPS[op](a.to("mtia"), b.to("mtia")).cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # bitwise: NaNs and signed zeros included
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    assert torch.equal(got.view(bits), expected.view(bits))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", ["broadcast", "noncontiguous", "int64", "mixed dtype", "bfloat16", "python number",
                                  "large"])
def test_other_calls_take_the_boxed_fallback_and_equal_cpu(op, case):
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(8, 6) + 3
    kwargs = {}
    if case == "broadcast":
        b = b[:1]
    elif case == "noncontiguous":
        a, b = a.t(), b.t()
    elif case == "int64":
        a, b = (a * 10).long(), (b * 10).long() + 100
    elif case == "mixed dtype":
        b = b.double()
    elif case == "bfloat16":
        a, b = a.bfloat16(), b.bfloat16()
    elif case == "large":
        a, b = torch.randn(40000), torch.randn(40000) + 3
    fn = getattr(torch, op)
    if case == "python number":
        expected, got = fn(a, 2.5), fn(a.to("mtia"), 2.5).cpu()
    else:
        expected, got = fn(a, b, **kwargs), fn(a.to("mtia"), b.to("mtia"), **kwargs).cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", ["add", "sub"])
def test_alpha_other_than_one_takes_the_boxed_fallback(op):
    a, b = torch.randn(64), torch.randn(64)
    fn = getattr(torch, op)
    torch.testing.assert_close(fn(a.to("mtia"), b.to("mtia"), alpha=0.3).cpu(), fn(a, b, alpha=0.3), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_the_unboxed_path_is_asynchronous(op):
    x = torch.ones(64, device="mtia")
    torch.mtia.synchronize()
    gate = openmtia._C._launch_blocking_task(0)
    try:
        y = getattr(torch, op)(x, x)  # returns although the stream is held
        assert not torch.mtia.current_stream().query()
    finally:
        gate.release()
    assert torch.equal(y.cpu(), getattr(torch, op)(torch.ones(64), torch.ones(64)))


def test_device_mismatch_and_autograd_are_unchanged():
    a = torch.randn(4, device="mtia", requires_grad=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.randn(4)
    if torch.mtia.device_count() > 1:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            a + torch.randn(4, device="mtia:1")
    b = torch.randn(4, device="mtia", requires_grad=True)
    ((a * b) / (a + b) - b).sum().backward()
    ac, bc = a.detach().cpu().requires_grad_(), b.detach().cpu().requires_grad_()
    ((ac * bc) / (ac + bc) - bc).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ac.grad)
    torch.testing.assert_close(b.grad.cpu(), bc.grad)


def test_while_capturing_the_boxed_path_prebuilds_the_kernel():
    x = torch.ones(64, device="mtia")
    before = openmtia._C._prebuilt_kernel_count()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        y = x + x
    assert openmtia._C._prebuilt_kernel_count() == before + 1
    x.fill_(3)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((64,), 6.0))
