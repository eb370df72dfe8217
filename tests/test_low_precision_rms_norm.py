"""bf16/fp16 rms_norm, forward and backward (csrc/aten/low_precision/norm.h:
torch.rms_norm calls _fused_rms_norm, whose CPU kernel is a composite of
casts and five ops), through the row loops (AVX2 and, on hosts with it,
AVX-512) and through torch's composite (OPENMTIA_LOW_PRECISION=native, or
no ISA), against CPU PyTorch in the same dtype and against float64. The
loops' autograd is registered on AutogradMTIA: double backward, a gradient
for rstd, forward AD and tracing must still work as on CPU."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
# (input shape, normalized shape), each over GRAIN elements: rows around the
# vectors (tails), rows of one element, two normalized dims, rows over the
# parallel threshold
SHAPES = [((GRAIN + 1, 1), (1,)), ((2521, 13), (13,)), ((257, 129), (129,)), ((16, 33, 100), (33, 100)),
          ((C._parallel_work() // 1000 + 3, 1000), (1000,))]

mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def inputs(shape, normalized, dtype, weighted):
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * 3 + 1).to(dtype)
    w = (torch.randn(normalized, generator=g) * 0.5 + 1).to(dtype) if weighted else None
    return x, w


def leaf(t, device):
    return None if t is None else t.detach().to(device).requires_grad_()


def forward_backward(x, w, normalized, dy, device):
    xx, ww = leaf(x, device), leaf(w, device)
    y = F.rms_norm(xx, normalized, ww)
    y.backward(dy.to(device))
    return y.detach().cpu(), xx.grad.cpu(), None if w is None else ww.grad.cpu()


def float64_bound(cpu, exact, dtype, scale):
    """Elementwise: as close to the float64 result as CPU's, give or take a
    rounding of the terms (scale: their magnitude)."""
    return (cpu.double() - exact).abs() + 2 * torch.finfo(dtype).eps * (exact.abs() + scale)


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "none"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_backward_match_cpu(shape, dtype, weighted, mode):
    shape, normalized = shape
    x, w = inputs(shape, normalized, dtype, weighted)
    x[1] = float("inf")  # a row of inf, a row with a NaN: NaN rows, as CPU's
    x[2, 0] = float("nan")
    dy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    cpu = forward_backward(x, w, normalized, dy, "cpu")
    exact = forward_backward(x.double(), None if w is None else w.double(), normalized, dy.double(), "cpu")
    for _ in range(2):  # (the signature's first call, then a later one)
        before = C._fused_norm_calls()
        got = forward_backward(x, w, normalized, dy, "mtia")
        torch.mtia.synchronize()
        assert C._fused_norm_calls() - before == (2 if mode == "fused" else 0)
        for g, c in zip(got, cpu):
            if c is None:
                continue
            assert g.dtype == c.dtype == dtype and g.shape == c.shape
            assert torch.equal(g.isnan(), c.isnan())
        rows = [r for r in range(shape[0]) if r not in (1, 2)]
        y, dx, dw = (t[rows] if t is not None and t.shape == x.shape else t for t in got)
        ey, edx = exact[0][rows], exact[1][rows]
        cy, cdx = cpu[0][rows], cpu[1][rows]
        xs = x[rows].double().abs()
        ms = (x[rows].double() ** 2).mean(tuple(range(x.dim() - len(normalized), x.dim())), keepdim=True)
        scale = xs * ms.rsqrt() * (w.double().abs() if w is not None else 1)
        assert bool(((y.double() - ey).abs() <= float64_bound(cy, ey, dtype, scale)).all())
        # dx: CPU differentiates its composite op by op, the loops use
        # torch's formula: each as close to float64 as CPU's, give or take
        # roundings of the formula's terms, rstd * (|g| + |x_hat| |sum(x_hat g)| / n)
        dims = tuple(range(x.dim() - len(normalized), x.dim()))
        g = dy[rows].double() * (w.double() if w is not None else 1)
        xh = x[rows].double() * ms.rsqrt()
        terms = ms.rsqrt() * (g.abs() + xh.abs() * (xh * g).sum(dims, keepdim=True).abs() / xh[0].numel())
        assert bool(((dx.double() - edx).abs() <= float64_bound(cdx, edx, dtype, 2 * terms)).all())
        if w is not None:  # (NaN rows: every column's sum is NaN)
            assert torch.equal(dw.isnan(), cpu[2].isnan())


def test_weight_gradient_is_summed_in_float32():
    # CPU's composite sums dy * x_hat over 4096 rows in float32 too: both
    # close to float64, far closer than a bf16 running sum would be
    x, w = inputs((4096, 256), (256,), torch.bfloat16, True)
    dy = torch.randn(4096, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    before = C._fused_norm_calls()
    _, _, dw = forward_backward(x, w, (256,), dy, "mtia")
    exact = forward_backward(x.double(), w.double(), (256,), dy.double(), "cpu")[2]
    assert C._fused_norm_calls() - before == 2
    torch.testing.assert_close(dw.double(), exact, atol=0.5, rtol=0.01)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_double_backward_and_rstd_gradient_match_cpu(dtype):
    x, w = inputs((300, 128), (128,), dtype, True)

    def double(device):
        xx, ww = leaf(x, device), leaf(w, device)
        y = F.rms_norm(xx, (128,), ww)
        gx, gw = torch.autograd.grad((y.float() ** 2).sum(), (xx, ww), create_graph=True)
        (gx.float().sum() + gw.float().sum()).backward()
        return [t.detach().cpu() for t in (y, gx, gw, xx.grad, ww.grad)]

    def rstd_grad(device):  # _fused_rms_norm's second output, differentiated
        xx, ww = leaf(x, device), leaf(w, device)
        y, r = torch.ops.aten._fused_rms_norm(xx, [128], ww, None)
        (y.float().sum() + r.sum()).backward()
        return [t.detach().cpu() for t in (y, r, xx.grad, ww.grad)]

    # double: the forward, then the loops' backward where the second
    # backward reaches y (the first, with create_graph, differentiated the
    # composite); rstd_grad: the forward (its backward: the composite's)
    for f, loops in ((double, 2), (rstd_grad, 1)):
        before = C._fused_norm_calls()
        got = f("mtia")
        assert C._fused_norm_calls() - before == loops
        for g, c in zip(got, f("cpu")):
            torch.testing.assert_close(g, c, atol=0.05 * float(c.abs().max()), rtol=0.05)


def test_forward_ad_inference_vmap_and_compile_match_cpu():
    x, w = inputs((400, 96), (96,), torch.bfloat16, True)  # (over GRAIN: the loops take it)
    m, mw = x.to("mtia"), w.to("mtia")
    want = F.rms_norm(x, (96,), w)
    with fwAD.dual_level():
        got = fwAD.unpack_dual(F.rms_norm(fwAD.make_dual(m, torch.ones_like(m)), (96,), mw))
        cpu = fwAD.unpack_dual(F.rms_norm(fwAD.make_dual(x, torch.ones_like(x)), (96,), w))
        torch.testing.assert_close(got.tangent.cpu(), cpu.tangent)
        torch.testing.assert_close(got.primal.cpu(), cpu.primal)
    before = C._fused_norm_calls()
    with torch.inference_mode():
        torch.testing.assert_close(F.rms_norm(m, (96,), mw).cpu(), want)
    assert C._fused_norm_calls() - before == 1  # (below autograd: the mtia kernel)
    batched = torch.func.vmap(lambda a: F.rms_norm(a, (96,), mw))(m.view(4, 100, 96))
    torch.testing.assert_close(batched.cpu().view(400, 96), want)
    compiled = torch.compile(lambda a, b: F.rms_norm(a, (96,), b))
    torch.testing.assert_close(compiled(m, mw).cpu(), want)


def test_calls_the_loops_do_not_take_match_cpu():
    x, w = inputs((512, 200), (200,), torch.bfloat16, True)
    cases = [
        (x.t().contiguous().t(), w),  # not contiguous
        (x, w.float()),  # weight of another dtype (CPU's composite warns once, then runs)
        (x.float(), w.float()),  # float32
    ]
    for a, b in cases:
        before = C._fused_norm_calls()
        got = forward_backward(a, b, (200,), torch.ones_like(a), "mtia")
        cpu = forward_backward(a, b, (200,), torch.ones_like(a), "cpu")
        assert C._fused_norm_calls() == before
        for g, c in zip(got, cpu):
            torch.testing.assert_close(g, c)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.rms_norm(x.to("mtia"), (7,), w.to("mtia"))
