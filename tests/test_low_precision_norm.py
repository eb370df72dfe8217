"""bf16/fp16 layer_norm, forward and backward (csrc/aten/low_precision/norm.h),
through the row loops (AVX2 and, on hosts with it, AVX-512) and through
CPU's kernels (OPENMTIA_LOW_PRECISION=native, or no ISA), against CPU
PyTorch in the same dtype."""
import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting
from norm_checks import parameter_grads_close_as_cpu

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
A = torch.ops.aten
# (input shape, normalized shape), each over GRAIN elements: rows around
# the vectors (tails), rows of one element, two normalized dims, rows over
# the parallel threshold
SHAPES = [((GRAIN + 1, 1), (1,)), ((2521, 13), (13,)), ((257, 129), (129,)), ((16, 33, 100), (33, 100)),
          ((C._parallel_work() // 1000 + 3, 1000), (1000,))]
AFFINE = ["weight_and_bias", "weight", "bias", "none"]


mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def on_mtia(mode, f, *args, fused=True):
    got = low_precision_setting.on_mtia(C._fused_norm_calls, 1 if mode == "fused" and fused else 0, f, *args)
    return tuple(t.cpu() if t is not None else None for t in got)


def inputs(shape, normalized, dtype, affine):
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * 3 + 1).to(dtype)
    w = (torch.randn(normalized, generator=g) * 0.5 + 1).to(dtype) if "weight" in affine else None
    b = torch.randn(normalized, generator=g).to(dtype) if "bias" in affine else None
    return x, w, b


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_cpu(shape, dtype, affine, mode):
    shape, normalized = shape
    x, w, b = inputs(shape, normalized, dtype, affine)
    x[1] = float("inf")  # a row of inf: NaN, as CPU's
    x[2, 0] = float("nan")
    cpu = A.native_layer_norm(x, normalized, w, b, 1e-5)
    exact = A.native_layer_norm(x.double(), normalized, *(t.double() if t is not None else None for t in (w, b)), 1e-5)
    for _ in range(2):  # (the signature's first call, then a later one)
        got = on_mtia(mode, lambda x, w, b: A.native_layer_norm(x, normalized, w, b, 1e-5), x, w, b)
        for g, c in zip(got, cpu):
            assert g.dtype == c.dtype == dtype and g.shape == c.shape
            assert torch.equal(g.isnan(), c.isnan())
        # mean and rstd: CPU's, give or take the rounding to the dtype
        torch.testing.assert_close(got[1], cpu[1], equal_nan=True)
        torch.testing.assert_close(got[2], cpu[2], equal_nan=True)
        # y: each element as close to the float64 result as CPU's, give or
        # take a rounding of the formula's terms ((x - mean) * rstd cancels
        # where x is near the mean: the order of CPU's float32 operations shows)
        y, mean, rstd = exact
        terms = (x.double().abs() + mean.abs()) * rstd * (w.double().abs() if w is not None else 1)
        if b is not None:
            terms = terms + b.double().abs()
        bound = (cpu[0].double() - y).abs() + torch.finfo(dtype).eps * (y.abs() + terms)
        keep = y.isfinite()
        assert bool(((got[0].double() - y).abs() <= bound)[keep].all())


def exact_grads(dy, x, normalized, mean, rstd, w):
    """layer_norm's backward in float64 from the forward's (rounded) mean and rstd."""
    dims = tuple(range(x.dim() - len(normalized), x.dim()))
    n = x[(0,) * (x.dim() - len(normalized))].numel()
    dy, x, mean, rstd = dy.double(), x.double(), mean.double(), rstd.double()
    g = dy * w.double() if w is not None else dy
    ds, db = (g * x).sum(dims, keepdim=True), g.sum(dims, keepdim=True)
    bb = (db * mean - ds) * rstd ** 3 / n
    dx = rstd * g + bb * x - bb * mean - db * rstd / n
    terms = rstd * g.abs() + (bb * x).abs() + (bb * mean).abs() + (db * rstd / n).abs()
    rows = tuple(range(x.dim() - len(normalized)))
    return dx, terms, (dy * (x - mean) * rstd).sum(rows), dy.sum(rows)


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backward_matches_cpu(shape, dtype, affine, mode):
    shape, normalized = shape
    x, w, b = inputs(shape, normalized, dtype, affine)
    dy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    _, mean, rstd = A.native_layer_norm(x, normalized, w, b, 1e-5)
    mask = [True, w is not None, b is not None]
    f = lambda dy, x, mean, rstd, w, b: A.native_layer_norm_backward(dy, x, normalized, mean, rstd, w, b, mask)
    cpu = f(dy, x, mean, rstd, w, b)
    got = on_mtia(mode, f, dy, x, mean, rstd, w, b)
    assert got[0].dtype == dtype and got[0].shape == x.shape
    # dx: each element as close to the float64 result as CPU's, give or take
    # a rounding of the formula's terms (they cancel: a row of one element
    # has dx 0, CPU's and mtia's rounding noise differ)
    exact_x, terms, exact_w, exact_b = exact_grads(dy, x, normalized, mean, rstd, w)
    bound = (cpu[0].double() - exact_x).abs() + torch.finfo(dtype).eps * (exact_x.abs() + terms)
    assert bool(((got[0].double() - exact_x).abs() <= bound).all())
    # the weight and bias gradients sum over rows: mtia in float32 with one
    # rounding, CPU's rounds partial sums to the dtype. Each is as close to
    # the float64 result as CPU's, give or take one rounding.
    parameter_grads_close_as_cpu(got, cpu, (None, exact_w, exact_b), mask, dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_output_mask_and_autograd_match_cpu(dtype, mode):
    x, w, b = inputs((64, 8, 130), (130,), dtype, "weight_and_bias")
    dy = torch.randn(64, 8, 130).to(dtype)
    _, mean, rstd = A.native_layer_norm(x, (130,), w, b, 1e-5)
    for mask in ([True, False, False], [False, True, True], [False, False, True]):
        f = lambda dy, x, mean, rstd, w, b: A.native_layer_norm_backward(dy, x, (130,), mean, rstd, w, b, mask)
        cpu, got = f(dy, x, mean, rstd, w, b), on_mtia(mode, f, dy, x, mean, rstd, w, b)
        for g, c, wanted in zip(got, cpu, mask):
            assert (g is None) == (c is None) == (not wanted)
        if mask[0]:
            torch.testing.assert_close(got[0], cpu[0])
    # through autograd (F.layer_norm): the forward's mean and rstd feed the
    # backward; every gradient as close to the float64 one as CPU's
    grads = {}
    for device in ("cpu", "mtia"):
        t, tw, tb = (v.detach().to(device).requires_grad_() for v in (x, w, b))
        n = C._fused_norm_calls()
        F.layer_norm(t, (130,), tw, tb).backward(dy.to(device))
        grads[device] = [v.grad.cpu() for v in (t, tw, tb)]
        if device == "mtia":
            torch.mtia.synchronize()
            assert C._fused_norm_calls() - n == (2 if mode == "fused" else 0)
    xd = x.double().requires_grad_()
    wd, bd = w.double().requires_grad_(), b.double().requires_grad_()
    F.layer_norm(xd, (130,), wd, bd).backward(dy.double())
    for got, cpu, exact in zip(grads["mtia"], grads["cpu"], (xd.grad, wd.grad, bd.grad)):
        got_err, cpu_err = (got.double() - exact).abs().max(), (cpu.double() - exact).abs().max()
        assert got_err <= 1.5 * cpu_err + torch.finfo(dtype).eps * exact.abs().max(), (got_err, cpu_err)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x, w, b = inputs((300, 200), (200,), dtype, "weight_and_bias")
    calls = {
        "float32_weight": lambda x, w, b: A.native_layer_norm(x, (200,), w.float(), b.float(), 1e-5),
        "transposed": lambda x, w, b: A.native_layer_norm(x.t(), (300,), None, None, 1e-5),
        "small": lambda x, w, b: A.native_layer_norm(x[:10], (200,), w, b, 1e-5),
        "strided_weight": lambda x, w, b: A.native_layer_norm(x[:, :100], (100,), w[::2], b[:100], 1e-5),
    }
    for name, f in calls.items():
        got = on_mtia(mode, f, x, w, b, fused=False)
        for g, c in zip(got, f(x, w, b)):
            torch.testing.assert_close(g, c, msg=name)
    # a normalized shape that is not the input's last dims: CPU's error, at the call
    with pytest.raises(RuntimeError) as cpu_error:
        A.native_layer_norm(x, (300,), None, None, 1e-5)
    with pytest.raises(RuntimeError) as mtia_error:
        A.native_layer_norm(x.to("mtia"), (300,), None, None, 1e-5)
    assert str(mtia_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError) as cpu_error:
        A.native_layer_norm(x, (200,), w[:100], None, 1e-5)
    with pytest.raises(RuntimeError) as mtia_error:
        A.native_layer_norm(x.to("mtia"), (200,), w[:100].to("mtia"), None, 1e-5)
    assert str(mtia_error.value) == str(cpu_error.value)
