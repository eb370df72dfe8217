"""bf16/fp16 ops whose CPU kernels cost far more than float32's plus the
conversions (xlogy: csrc/aten/low_precision/low_precision.h, lowPrecisionStandInOps; erfinv,
erfc and sinc are tables now: test_low_precision_tables.py): their calls run CPU's float32 kernel over float32 stand-ins, each result rounded
once to the dtype, where the path is float32; in mode native CPU's kernel of
the dtype. Against CPU's bf16/fp16 kernels within the dtype's tolerances, and
against float64 rounded once."""
import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]


mode = low_precision_setting.float32_or_native


def sample(shape, dtype, seed, lo=-3.0, hi=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g) * (hi - lo) + lo
    return x.to(dtype)


CASES = {
    "xlogy": (lambda x: torch.xlogy(x, x.abs()[0]), (-2, 2)),  # (broadcast: two alike tensors are the loops')
    "xlogy number": (lambda x: torch.xlogy(x, 3.0), (-2, 2)),
}


def as_list(r):
    return list(r) if isinstance(r, tuple) else [r]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_stand_ins_match_cpu_and_float64(case, dtype, mode):
    f, (lo, hi) = CASES[case]
    for seed in (0, 1):  # (the signature's first call, then a later one)
        x = sample((129, 257), dtype, seed, lo, hi)  # (above GRAIN_SIZE: smaller unary calls are the small-op path's)
        x.view(-1)[5] = float("nan")
        before = C._low_precision_float32_calls()
        got = as_list(f(x.to("mtia")))
        torch.mtia.synchronize()
        assert C._low_precision_float32_calls() - before == (1 if mode == "float32" else 0)
        cpu = as_list(f(x))
        exact = [r.to(dtype) for r in as_list(f(x.double()))]
        for g, c, e in zip(got, cpu, exact):
            g = g.cpu()
            assert g.dtype == c.dtype and g.shape == c.shape
            torch.testing.assert_close(g, c, equal_nan=True)  # CPU's kernel of the dtype
            if mode == "float32":
                torch.testing.assert_close(g, e, equal_nan=True)  # float32 math, one rounding


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_stand_ins_keep_cpus_special_values_and_errors(dtype, mode):
    x = torch.tensor([-1.0, 1.0, 1.5, -0.0, 0.0, float("inf"), -float("inf"), float("nan")] * 4100).to(dtype)
    for f in (lambda x: torch.xlogy(x, x), lambda x: torch.xlogy(x, 2.0)):
        got = f(x.to("mtia")).cpu()
        want = f(x)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        torch.testing.assert_close(got, want, equal_nan=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.xlogy(x.to("mtia"), x)
    with pytest.raises(RuntimeError, match="The size of tensor a"):
        torch.xlogy(x.to("mtia"), x[:7].to("mtia"))
    torch.testing.assert_close(torch.xlogy(x.to("mtia"), x.to("mtia")).cpu(), torch.xlogy(x, x), equal_nan=True)  # still usable


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_the_same_memory_twice_gets_one_stand_in(dtype, mode):
    # attention's q = k = v (one tensor, or two views alike): one float32
    # stand-in; the results are those of distinct copies. An out= that is an
    # input's memory gets the result written back into it.
    import torch.nn.functional as F
    x = sample((2, 4, 64, 32), dtype, 3)
    m = x.to("mtia")
    distinct = F.scaled_dot_product_attention(m.clone(), m.clone(), m.clone())
    before = C._low_precision_float32_calls()
    same = F.scaled_dot_product_attention(m, m, m)
    views = F.scaled_dot_product_attention(m, m.view(x.shape), m[:])
    torch.mtia.synchronize()
    assert C._low_precision_float32_calls() - before == (2 if mode == "float32" else 0)
    for got in (same, views):
        assert torch.equal(got.cpu().view(torch.int16), distinct.cpu().view(torch.int16))
    torch.testing.assert_close(same.cpu(), F.scaled_dot_product_attention(x, x, x))
    y = sample((129, 257), dtype, 4, 0.1, 2.0)
    a, b = y.to("mtia"), y.to("mtia")
    torch.xlogy(a, a, out=a)
    want = torch.xlogy(b, b.clone(), out=torch.empty_like(b))  # (out=: the stand-in's call, as a's)
    assert torch.equal(a.cpu().view(torch.int16), want.cpu().view(torch.int16))
    torch.testing.assert_close(a.cpu(), torch.xlogy(y, y))
