"""bf16/fp16 order ops (sort, topk, kthvalue, median, nanmedian, mode,
cummax, cummin) over
float32 stand-ins (csrc/aten/low_precision/low_precision.h, lowPrecisionOrderOps): widening is
exact and keeps every comparison, so CPU's float32 kernel gives CPU's
bf16/fp16 values and indices bit for bit, ties, NaN, inf and -0.0 included.
In mode native they run CPU's kernel of the dtype itself."""
import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]


@pytest.fixture(params=["float32-avx2", "native", "float32-none"])
def path(request):
    """'float32' where the order ops take the stand-ins (mode float32, with
    or without the vector loops for the conversions), else 'native'."""
    for mode, _ in low_precision_setting.setting(request.param):
        yield mode


def sample(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 4).round().to(dtype)  # many ties
    flat = x.view(-1)
    flat[3], flat[11], flat[17], flat[29] = float("nan"), float("inf"), -float("inf"), -0.0
    flat[-1] = float("nan")
    return x


CASES = {
    "sort": lambda x: torch.sort(x, dim=-1),
    "sort descending": lambda x: torch.sort(x, dim=-1, descending=True),
    "sort stable": lambda x: torch.sort(x, dim=0, stable=True),
    "sort stable descending": lambda x: torch.sort(x, dim=-1, descending=True, stable=True),
    "argsort": lambda x: torch.argsort(x, dim=-1),
    "topk": lambda x: torch.topk(x, min(7, x.shape[-1]), dim=-1),
    "topk smallest": lambda x: torch.topk(x, min(5, x.shape[0]), dim=0, largest=False),
    "kthvalue": lambda x: torch.kthvalue(x, min(4, x.shape[-1]), dim=-1),
    "median dim": lambda x: torch.median(x, dim=-1),
    "median": lambda x: torch.median(x),
    "nanmedian dim": lambda x: torch.nanmedian(x, dim=0),
    "mode": lambda x: torch.mode(x, dim=-1),
    "cummax": lambda x: torch.cummax(x, dim=-1),
    "cummin": lambda x: torch.cummin(x, dim=0),
}


def same(got, want):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.is_floating_point():  # bit for bit (-0.0 too), NaN where CPU's is (a NaN's bits: ATen's
            nan = w.isnan()            # float32 -> bf16 conversion makes 0xffff of it, CPU's sort keeps it)
            assert torch.equal(g.isnan(), nan)
            assert torch.equal(g[~nan].view(torch.int16), w[~nan].view(torch.int16))
        else:
            assert torch.equal(g, w)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", [(37, 129), (5, 1000), (1, 1)], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_order_ops_match_cpu_bit_for_bit(case, shape, dtype, path):
    f = CASES[case]
    x = sample(shape, dtype, seed=shape[-1]) if shape != (1, 1) else torch.tensor([[float("nan")]], dtype=dtype)
    want = f(x)
    for _ in range(2):  # (the signature's first call, then a later one)
        before = C._low_precision_float32_calls()
        got = f(x.to("mtia"))
        torch.mtia.synchronize()
        assert C._low_precision_float32_calls() - before == (1 if path == "float32" else 0)
        same(got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_out_variants_and_non_contiguous_inputs_match_cpu(dtype, path):
    x = sample((64, 200), dtype, seed=5)
    m = x.to("mtia")
    values, indices = torch.empty(0, dtype=dtype, device="mtia"), torch.empty(0, dtype=torch.long, device="mtia")
    got = torch.sort(m, dim=1, descending=True, out=(values, indices))
    assert got[0] is values and got[1] is indices
    same((values, indices), torch.sort(x, dim=1, descending=True))
    same(torch.topk(m.t(), 9, dim=0), torch.topk(x.t(), 9, dim=0))
    same(torch.kthvalue(m[:, ::3], 6, dim=1), torch.kthvalue(x[:, ::3], 6, dim=1))


def test_an_argument_error_raises_at_the_call():
    m = sample((8, 16), torch.bfloat16, seed=1).to("mtia")
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(m, 17, dim=1)
    with pytest.raises(RuntimeError, match="kthvalue\\(\\): selected number k out of range for dimension 1"):
        torch.kthvalue(m, 40, dim=1)
    torch.mtia.synchronize()
    assert torch.ones(2, device="mtia").sum().item() == 2
