"""bf16/fp16 embedding backward (csrc/aten/low_precision/indexed.h): each
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


# (fp16 with either index and bf16 with an int32 one are the loops'; bf16
# with an int64 index keeps CPU's kernel)
def index_add_fused(dtype, index_dtype):
    return dtype == torch.float16 or index_dtype == torch.int32


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (40, 3000, 1000), (7, 500, 50, 130)], ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_index_add_bits_as_cpu(shape, index_dtype, dtype, mode):
    # CPU's order: an int64 index sums each indexed row in float32 in index
    # order and rounds once; an int32 one rounds each add. Repeated indices
    # (fewer rows than indices), NaN and inf among the sources.
    rows, n, *row = shape
    g = torch.Generator().manual_seed(n)
    index = torch.randint(0, rows, (n,), generator=g).to(index_dtype)
    source = (torch.randn(n, *row, generator=g) * 3).to(dtype)
    source.view(-1)[[5, 77]] = torch.tensor([float("nan"), float("inf")], dtype=dtype)
    self = torch.randn(rows, *row, generator=g).to(dtype)
    want = self.clone().index_add_(0, index, source)
    for _ in range(2):  # (the signature's first call, then a later one)
        m = self.to("mtia")
        out = counted(mode, lambda: m.index_add_(0, index.to("mtia"), source.to("mtia")),
                      fused=index_add_fused(dtype, index_dtype))
        assert out is m
        assert same_bits(m.cpu(), want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_index_add_errors_and_calls_the_loops_do_not_take(dtype, mode):
    g = torch.Generator().manual_seed(6)
    self = torch.randn(300, 200, generator=g).to(dtype)
    source = torch.randn(400, 200, generator=g).to(dtype)
    index = torch.randint(0, 300, (400,), generator=g).int()
    cases = [lambda s, i, src: s.index_add_(0, i, src, alpha=2),  # alpha not 1
             lambda s, i, src: s.index_add_(1, i[:200] % 200, src[:300]),  # not dim 0
             lambda s, i, src: s.index_add_(0, i, src.t().contiguous().t()),  # source not contiguous
             lambda s, i, src: s[:, :32].contiguous().index_add_(0, i, src[:, :32].contiguous()),  # rows under 64
             lambda s, i, src: s.index_add(0, i, src)]  # the functional form: CPU's kernel
    for f in cases:
        got = counted(mode, lambda: f(self.to("mtia"), index.to("mtia"), source.to("mtia")), fused=False)
        torch.testing.assert_close(got.cpu(), f(self.clone(), index, source))
    with pytest.raises(RuntimeError, match=r"index_add_\(\): self \(\w+\) and source \(Float\) must have the same scalar type"):
        self.to("mtia").index_add_(0, index.to("mtia"), source.float().to("mtia"))
    # an index out of range: the device's data, at the next synchronize
    # (CPU's kernel, which mode native runs, raises at the call)
    bad = index.clone()
    bad[7] = 300
    if mode == "fused":
        m = self.to("mtia")
        m.index_add_(0, bad.to("mtia"), source.to("mtia"))
        with pytest.raises(RuntimeError, match="index 300 is out of bounds for dimension 0 with size 300"):
            torch.mtia.synchronize()
    else:
        with pytest.raises((IndexError, RuntimeError), match="out of bounds|out of range"):
            self.to("mtia").index_add_(0, bad.to("mtia"), source.to("mtia"))
            torch.mtia.synchronize()
    m = self.to("mtia")  # the device stays usable
    m.index_add_(0, index.to("mtia"), source.to("mtia"))
    assert same_bits(m.cpu(), self.clone().index_add_(0, index, source))


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (300, 200, 150), (5, 7, 900, 1200)], ids=str)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_scatter_add_along_the_last_dim_bits_as_cpu(shape, dtype, mode):
    # CPU's bf16/fp16 kernel: each self row in float32, the source added at
    # each index in order (repeated indices), rounded once; NaN and inf
    *lead, n, m = shape
    g = torch.Generator().manual_seed(n)
    index = torch.randint(0, m, (*lead, n), generator=g)
    src = (torch.randn(*lead, n, generator=g) * 3).to(dtype)
    src.view(-1)[[3, 50]] = torch.tensor([float("nan"), -float("inf")], dtype=dtype)
    self = torch.randn(*lead, m, generator=g).to(dtype)
    want = self.clone().scatter_add_(-1, index, src)
    for _ in range(2):  # (the signature's first call, then a later one)
        s = self.to("mtia")
        out = counted(mode, lambda: s.scatter_add_(len(shape) - 2, index.to("mtia"), src.to("mtia")))
        assert out is s
        assert same_bits(s.cpu(), want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_scatter_add_errors_and_calls_the_loops_do_not_take(dtype, mode):
    g = torch.Generator().manual_seed(7)
    self = torch.randn(300, 200, generator=g).to(dtype)
    src = torch.randn(300, 250, generator=g).to(dtype)
    index = torch.randint(0, 200, (300, 250), generator=g)
    cases = [lambda s, i, x: s.scatter_add_(0, i[:, :200] % 300, x[:, :200]),  # not the last dim
             lambda s, i, x: s.scatter_add_(1, i[:, :100].contiguous(), x),  # index smaller than src
             lambda s, i, x: s.scatter_add_(1, i, x.t().contiguous().t()),  # src not contiguous
             lambda s, i, x: s.scatter_add(1, i, x)]  # the functional form: CPU's kernel
    for f in cases:
        got = counted(mode, lambda: f(self.to("mtia"), index.to("mtia"), src.to("mtia")), fused=False)
        assert same_bits(got.cpu(), f(self.clone(), index, src))
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        self.to("mtia").scatter_add_(1, index.to("mtia"), src.float().to("mtia"))
    # an index out of range: the device's data, at the next synchronize
    # (CPU's kernel, which mode native runs, raises at the call)
    bad = index.clone()
    bad[150, 7] = 200
    if mode == "fused":
        self.to("mtia").scatter_add_(1, bad.to("mtia"), src.to("mtia"))
        with pytest.raises(RuntimeError, match="index 200 is out of bounds for dimension 1 with size 200"):
            torch.mtia.synchronize()
    else:
        with pytest.raises(RuntimeError, match="index 200 is out of bounds for dimension 1 with size 200"):
            self.to("mtia").scatter_add_(1, bad.to("mtia"), src.to("mtia"))
            torch.mtia.synchronize()
    s = self.to("mtia")  # the device stays usable
    s.scatter_add_(1, index.to("mtia"), src.to("mtia"))
    assert same_bits(s.cpu(), self.clone().scatter_add_(1, index, src))
