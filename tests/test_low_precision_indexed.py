"""bf16/fp16 embedding backward (csrc/low_precision_indexed.h): each
indexed row added in index order with the arithmetic loop (CPU's bits),
through the loops (AVX2 and, on hosts with it, AVX-512) and through CPU's
kernels (mode native, or no ISA), against CPU PyTorch in the same dtype."""
import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
A = torch.ops.aten

mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def same_bits(x, y):
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x[~x.isnan()].view(torch.int16),
                                                              y[~y.isnan()].view(torch.int16))


def counted(mode, f, fused=True):
    n = C._fused_indexed_calls()
    out = f()
    torch.mtia.synchronize()
    assert C._fused_indexed_calls() - n == (1 if mode == "fused" and fused else 0)
    return out


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_bits_as_cpu(padding_idx, dtype, mode):
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(1000, 128, generator=g).to(dtype)
    idx = torch.randint(0, 1000, (64, 40), generator=g)
    idx[0, :5] = 3
    grad = (torch.randn(64, 40, 128, generator=g) * 2).to(dtype)
    w = weight.clone().requires_grad_()
    F.embedding(idx, w, padding_idx=padding_idx).backward(grad)
    wm = weight.to("mtia").requires_grad_()
    out = F.embedding(idx.to("mtia"), wm, padding_idx=padding_idx)
    counted(mode, lambda: out.backward(grad.to("mtia")))
    assert same_bits(wm.grad.cpu(), w.grad)
    # scale_grad_by_freq: CPU's kernel
    f = lambda gr, i: A.embedding_dense_backward(gr, i, 1000, -1, True)
    got = counted(mode, lambda: f(grad.to("mtia"), idx.to("mtia")), fused=False)
    torch.testing.assert_close(got.cpu(), f(grad, idx))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_embedding_backward_errors_and_calls_the_loops_do_not_take(dtype, mode):
    g = torch.Generator().manual_seed(5)
    grad = torch.randn(400, 128, generator=g).to(dtype)
    idx = torch.randint(0, 1000, (400,), generator=g)
    f = lambda gr, i: A.embedding_dense_backward(gr, i, 1000, -1, False)
    for index in (idx, idx.int()):
        got = counted(mode, lambda: f(grad.to("mtia"), index.to("mtia")))
        assert same_bits(got.cpu(), f(grad, index))
    cases = [(grad[:, :32].contiguous(), idx),  # rows under 64 elements
             (grad.t().contiguous().t(), idx),  # not contiguous
             (grad.float(), idx)]
    for gr, i in cases:
        got = counted(mode, lambda: f(gr.to("mtia"), i.to("mtia")), fused=False)
        torch.testing.assert_close(got.cpu(), f(gr, i))
    # an index out of range: the device's data, at the next synchronize (CPU's
    # kernel, which mode native runs, skips it silently)
    bad = idx.clone()
    bad[7] = 1000
    got = f(grad.to("mtia"), bad.to("mtia"))
    if mode == "fused":
        with pytest.raises(RuntimeError, match="index 1000 is out of bounds for dimension 0 with size 1000"):
            torch.mtia.synchronize()
    else:
        assert same_bits(got.cpu(), f(grad, bad))
    del got
    assert same_bits(f(grad.to("mtia"), idx.to("mtia")).cpu(), f(grad, idx))  # the device stays usable
