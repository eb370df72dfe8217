"""bf16/fp16 group_norm, forward and backward (csrc/aten/low_precision/norm.cpp),
through the loops (AVX2 and, on hosts with it, AVX-512) and through CPU's
kernels (OPENMTIA_LOW_PRECISION=native, or no ISA), against CPU PyTorch in
the same dtype and the float64 result: each element as close to float64's
as CPU's, give or take a rounding of the formula's terms."""
import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting
from norm_checks import close_as_cpu, parameter_grads_close_as_cpu

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
A = torch.ops.aten
# (input shape, groups): over 32768 elements, channels of at least 64
SHAPES = [((9, 64, 8, 8), 8), ((5, 12, 600), 4), ((2, 6, 65, 47), 3), ((4, 64, 24, 24), 8), ((1, 32, 33, 33), 32)]
AFFINE = ["weight_and_bias", "weight", "none"]

mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def on_mtia(mode, f, *args, fused=True):
    got = low_precision_setting.on_mtia(C._fused_norm_calls, 1 if mode == "fused" and fused else 0, f, *args)
    return tuple(t.cpu() if t is not None else None for t in got)


def inputs(shape, dtype, affine, seed=0):
    g = torch.Generator().manual_seed(shape[-1] + seed)
    x = (torch.randn(shape, generator=g) * 3 + 1).to(dtype)
    w = (torch.randn(shape[1], generator=g) * 0.5 + 1).to(dtype) if "weight" in affine else None
    b = torch.randn(shape[1], generator=g).to(dtype) if "bias" in affine else None
    return x, w, b


def dims(x, groups):
    n, c = x.shape[:2]
    return n, c, x[0, 0].numel(), groups


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_cpu(shape, dtype, affine, mode):
    shape, groups = shape
    for seed in (0, 1):  # (the signature's first call, then a later one)
        x, w, b = inputs(shape, dtype, affine, seed)
        x[0, 0].view(-1)[3] = float("nan")  # a group of NaN, as CPU's
        f = lambda x, w, b: A.native_group_norm(x, w, b, *dims(x, groups), 1e-5)
        cpu = f(x, w, b)
        got = on_mtia(mode, f, x, w, b)
        for g, c in zip(got, cpu):
            assert g.dtype == c.dtype == dtype and g.shape == c.shape
            assert torch.equal(g.isnan(), c.isnan())
        torch.testing.assert_close(got[1], cpu[1], equal_nan=True)  # mean, rstd: CPU's, give or take a rounding
        torch.testing.assert_close(got[2], cpu[2], equal_nan=True)
        n, c, hw, _ = dims(x, groups)
        xd = x.double().view(n, groups, -1)
        mean, rstd = xd.mean(-1, keepdim=True), 1 / (xd.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        wd = (w.double() if w is not None else torch.ones(c, dtype=torch.double)).view(1, c, 1)
        bd = (b.double() if b is not None else torch.zeros(c, dtype=torch.double)).view(1, c, 1)
        y = ((xd - mean) * rstd).view(n, c, -1) * wd + bd
        terms = (x.double().view(n, c, -1).abs() + mean.repeat_interleave(c // groups, 1).abs()) * \
            rstd.repeat_interleave(c // groups, 1) * wd.abs() + bd.abs()
        close_as_cpu(got[0].view(n, c, -1), cpu[0].view(n, c, -1), y, terms, dtype)


def exact_grads(dy, x, mean, rstd, w, groups):
    """group_norm's backward in float64 from the forward's (rounded) mean and rstd."""
    n, c = x.shape[:2]
    d = c // groups
    dy, x = dy.double().view(n, c, -1), x.double().view(n, c, -1)
    m, rs = (t.double().repeat_interleave(d, 1).unsqueeze(-1) for t in (mean, rstd))  # (n, c, 1)
    wd = (w.double() if w is not None else torch.ones(c, dtype=torch.double)).view(1, c, 1)
    ds, db = (dy * x).sum(-1, keepdim=True), dy.sum(-1, keepdim=True)  # (n, c, 1)
    ds_g = (ds * wd).view(n, groups, d).sum(-1).repeat_interleave(d, 1).unsqueeze(-1)
    db_g = (db * wd).view(n, groups, d).sum(-1).repeat_interleave(d, 1).unsqueeze(-1)
    s = 1.0 / (d * x.shape[-1])
    c2 = (db_g * m - ds_g) * rs ** 3 * s
    c3 = -c2 * m - db_g * rs * s
    dx = rs * wd * dy + c2 * x + c3
    terms = (rs * wd * dy).abs() + (c2 * x).abs() + c3.abs()
    dw = ((ds - db * m) * rs).sum(0).view(c)
    return dx, terms, dw, db.sum(0).view(c)


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backward_matches_cpu(shape, dtype, affine, mode):
    shape, groups = shape
    x, w, _ = inputs(shape, dtype, affine)
    dy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    _, mean, rstd = A.native_group_norm(x, w, None, *dims(x, groups), 1e-5)
    mask = [True, w is not None, w is not None]
    f = lambda dy, x, mean, rstd, w: A.native_group_norm_backward(dy, x, mean, rstd, w, *dims(x, groups), mask)
    cpu = f(dy, x, mean, rstd, w)
    got = on_mtia(mode, f, dy, x, mean, rstd, w)
    assert got[0].dtype == dtype and got[0].shape == x.shape
    exact_x, terms, exact_w, exact_b = exact_grads(dy, x, mean, rstd, w, groups)
    n, c = x.shape[:2]
    close_as_cpu(got[0].view(n, c, -1), cpu[0].view(n, c, -1), exact_x, terms, dtype)
    parameter_grads_close_as_cpu(got, cpu, (None, exact_w, exact_b), mask, dtype)  # (sums over samples)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_autograd_and_calls_the_loops_do_not_take(dtype, mode):
    # F.group_norm with autograd: forward and backward through the loops
    x, w, b = inputs((5, 32, 16, 16), dtype, "weight_and_bias")
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    xm = [t.to("mtia").detach().requires_grad_() for t in (x, w, b)]
    n0 = C._fused_norm_calls()
    F.group_norm(xm[0], 4, xm[1], xm[2]).square().sum().backward()
    torch.mtia.synchronize()
    assert C._fused_norm_calls() - n0 == (2 if mode == "fused" else 0)
    F.group_norm(xs[0], 4, xs[1], xs[2]).square().sum().backward()
    for a, e in zip(xm, xs):
        torch.testing.assert_close(a.grad.cpu(), e.grad, rtol=0.05, atol=0.5)
    # channels under 64 elements, a float32 weight (mixed): CPU's kernel. (A
    # channels_last input reaches the device contiguous: torch's group_norm
    # makes it so on every device but CPU, as on CUDA.)
    cases = [
        (lambda x: F.group_norm(x, 8), torch.randn(600, 64, 1).to(dtype)),
        (lambda x: F.group_norm(x, 4, torch.ones(32).to("mtia" if x.device.type == "mtia" else "cpu")), x),
    ]
    for f, t in cases:
        n0 = C._fused_norm_calls()
        got = f(t.to("mtia")).cpu()
        assert C._fused_norm_calls() == n0
        torch.testing.assert_close(got, f(t), equal_nan=True)
    with pytest.raises(RuntimeError, match="Expected number of channels in input to be divisible by num_groups"):
        F.group_norm(x.to("mtia"), 5)
