"""bf16/fp16 softmax and log_softmax, forward and backward, over the last dim
(csrc/aten/low_precision/softmax.h) through the row loop (AVX2 and, on hosts with
it, AVX-512) and through CPU's kernels (OPENMTIA_LOW_PRECISION=native, or no
ISA), against CPU PyTorch in the same dtype."""
import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
A = torch.ops.aten
# (rows, cols), each over GRAIN elements: rows around the vectors and the
# four-vector steps, rows of one element, rows over the parallel threshold
SHAPES = [(GRAIN + 1, 1), (2521, 13), (GRAIN // 64 + 1, 64), (1929, 17), (33, 1025),
          (C._parallel_work() // 1000 + 3, 1000)]
BACKWARD = {"softmax": (A._softmax_backward_data, torch.softmax),
            "log_softmax": (A._log_softmax_backward_data, torch.log_softmax)}


mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def on_mtia(mode, f, *args, fused=True):
    return low_precision_setting.on_mtia(C._fused_softmax_calls, 1 if mode == "fused" and fused else 0, f,
                                         *args).cpu()


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(BACKWARD))
def test_backward_matches_cpu(op, shape, dtype, mode):
    backward, forward = BACKWARD[op]
    g = torch.Generator().manual_seed(shape[1])
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    grad = torch.randn(shape, generator=g).to(dtype)
    grad[1, 0] = float("nan")  # a NaN row
    y = forward(x, -1)
    for dim in (-1, len(shape) - 1):  # (the first and a later call of the signature)
        got = on_mtia(mode, lambda a, b: backward(a, b, dim, dtype), grad, y)
        cpu = backward(grad, y, dim, dtype)
        assert got.dtype == cpu.dtype == dtype and got.shape == cpu.shape
        assert torch.equal(got.isnan(), cpu.isnan())
        torch.testing.assert_close(got, cpu, equal_nan=True)
        # each element as close to the float64 result as CPU's, give or take
        # a rounding of the formula's terms (g - s cancels: the sum's order shows)
        gd, yd = grad.double(), y.double()
        exact = backward(gd, yd, dim, torch.float64)
        if op == "softmax":
            terms = yd.abs() * (gd.abs() + (gd * yd).sum(-1, keepdim=True).abs())
        else:
            terms = gd.abs() + yd.exp() * gd.sum(-1, keepdim=True).abs()
        bound = (cpu.double() - exact).abs() + torch.finfo(dtype).eps * (exact.abs() + terms)
        keep = exact.isfinite()
        assert bool(((got.double() - exact).abs() <= bound)[keep].all())


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", sorted(BACKWARD))
def test_autograd_through_softmax_matches_cpu(op, dtype, mode):
    _, forward = BACKWARD[op]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, 129, generator=g).to(dtype)
    w = torch.randn(8, 64, 129, generator=g).to(dtype)
    grads = []
    for device in ("cpu", "mtia"):
        t = x.detach().to(device).requires_grad_()
        n = C._fused_softmax_calls()
        (forward(t, -1) * w.to(device)).sum().backward()
        grads.append(t.grad.cpu())
        if device == "mtia":
            torch.mtia.synchronize()
            assert C._fused_softmax_calls() - n == (2 if mode == "fused" else 0)  # forward and backward
    # (the loops sum in another order than CPU's kernel: a gradient may be a
    # rounding of the dtype away from CPU's, 1 in 66048 here)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=2 * torch.finfo(dtype).eps)
    # every gradient as close to the float64 one as CPU's, give or take a
    # rounding of its terms
    t = x.double().requires_grad_()
    (forward(t, -1) * w.double()).sum().backward()
    terms = w.double().abs() + forward(x.double(), -1).exp() * w.double().sum(-1, keepdim=True).abs()
    bound = (grads[0].double() - t.grad).abs() + 2 * torch.finfo(dtype).eps * terms
    assert bool(((grads[1].double() - t.grad).abs() <= bound).all())


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = torch.randn(300, 200).to(dtype)
    y, grad = torch.softmax(x, 0), torch.randn(300, 200).to(dtype)
    calls = {
        "dim_0": lambda a, b: A._softmax_backward_data(a, b, 0, dtype),
        "transposed": lambda a, b: A._softmax_backward_data(a.t(), b.t(), 1, dtype),
        "small": lambda a, b: A._log_softmax_backward_data(a[:10], b[:10], 1, dtype),
    }
    for name, f in calls.items():
        got = on_mtia(mode, f, grad, y, fused=False)
        torch.testing.assert_close(got, f(grad, y), msg=name)
    # another input dtype than the tensors' (softmax(x, dtype=...)): CPU's kernel
    f = lambda a, b: A._softmax_backward_data(a, b, 1, torch.float32)
    torch.testing.assert_close(on_mtia(mode, f, grad, y, fused=False), f(grad, y))
    with pytest.raises(IndexError) as cpu_error:
        A._softmax_backward_data(grad, y, 2, dtype)
    with pytest.raises(IndexError) as mtia_error:
        A._softmax_backward_data(grad.to("mtia"), y.to("mtia"), 2, dtype)
    assert str(mtia_error.value) == str(cpu_error.value)


FORWARD = {"softmax": A._softmax, "log_softmax": A._log_softmax}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(FORWARD))
def test_forward_matches_cpu(op, shape, dtype, mode):
    """CPU's results within the dtype's tolerance (log_softmax: CPU's bf16
    and fp16 kernel rounds the sum and its log to the dtype; so does the
    loop), each element as close to the float64 result as CPU's, give or
    take a rounding; NaN rows (a NaN, a row of -inf, an inf) as CPU's."""
    forward = FORWARD[op]
    g = torch.Generator().manual_seed(shape[1])
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    x[1, 0] = float("nan")
    x[2] = float("-inf")
    x[3, 0] = float("inf")
    if shape[1] > 2:
        x[4, 1] = float("-inf")
    for dim in (-1, len(shape) - 1):  # (the first and a later call of the signature)
        got = on_mtia(mode, lambda a: forward(a, dim, False), x)
        cpu = forward(x, dim, False)
        assert got.dtype == cpu.dtype == dtype and got.shape == cpu.shape
        assert torch.equal(got.isnan(), cpu.isnan()) and torch.equal(got.isinf(), cpu.isinf())
        exact = forward(x.double(), dim, False)
        keep = exact.isfinite()
        bound = (cpu.double() - exact).abs() + torch.finfo(dtype).eps * (exact.abs() + (op == "log_softmax"))
        assert bool(((got.double() - exact).abs() <= bound)[keep].all())
        torch.testing.assert_close(got, cpu, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_forward_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = torch.randn(300, 200).to(dtype)
    calls = {
        "dim_0": lambda a: A._softmax(a, 0, False),
        "transposed": lambda a: A._log_softmax(a.t(), 1, False),
        "small": lambda a: A._softmax(a[:10], 1, False),
        "float32_result": lambda a: torch.softmax(a, 1, dtype=torch.float32),
    }
    for name, f in calls.items():
        torch.testing.assert_close(on_mtia(mode, f, x, fused=False), f(x), msg=name)
    # half_to_float: CPU's kernel raises, on mtia as on CPU
    with pytest.raises(RuntimeError) as cpu_error:
        A._softmax(x, 1, True)
    with pytest.raises(RuntimeError) as mtia_error:
        A._softmax(x.to("mtia"), 1, True)
    assert str(mtia_error.value) == str(cpu_error.value)
