"""bf16/fp16 ops that only move elements (flip, gather, scatter with a
tensor of values) over int16 views of the same bytes (csrc/aten/low_precision/low_precision.h,
lowPrecisionBitsOps): CPU's kernel for 2-byte integers, which is faster than
its bf16/fp16 one, moves the same bits. Calls with a number converted to the
dtype (scatter's value, its reduce) and mixed dtypes keep CPU's kernel of the
dtype (and its errors). In mode native every call does."""
import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]


mode = low_precision_setting.float32_or_native


def sample(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    flat = x.view(-1)
    for k, v in zip((1, 4, 6, 9, 0), (float("nan"), float("inf"), -float("inf"), -0.0, float("nan"))):
        if k < flat.numel():
            flat[k] = v
    return x


def index(shape, high, seed):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def same_bits(got, want):
    """Bit for bit (-0.0 too), NaN where CPU's is (a NaN's own bits: CPU's
    bf16 gather widens and narrows, which makes 0xffff of 0x7fc0; the int16
    kernel keeps them)."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


def on_mtia(v):
    return v.to("mtia") if isinstance(v, torch.Tensor) else v


CASES = {
    "flip last": lambda x, i: x.flip(-1),
    "flip both": lambda x, i: x.flip(0, 1),
    "flip transposed": lambda x, i: x.t().flip(1),
    "gather": lambda x, i: torch.gather(x, 1, i),
    "gather dim 0": lambda x, i: torch.gather(x, 0, i),
    "gather out": lambda x, i: torch.gather(x, 1, i, out=torch.empty(i.shape, dtype=x.dtype, device=x.device)),
    "scatter_": lambda x, i: torch.zeros_like(x).scatter_(1, i, x),
    "scatter": lambda x, i: torch.scatter(x * 0, 0, i, x),
    "scatter out": lambda x, i: torch.scatter(x, 1, i, x, out=torch.empty_like(x)),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", [(33, 70), (1, 1)], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_moves_give_cpus_bits(case, shape, dtype, mode):
    f = CASES[case]
    x, i = sample(shape, dtype, seed=shape[-1]), index(shape, min(shape), 3)  # (an index of either dim)
    want = f(x, i)
    for _ in range(2):  # (the signature's first call, then a later one)
        before = C._low_precision_bits_calls()
        got = f(on_mtia(x), on_mtia(i))
        torch.mtia.synchronize()
        assert C._low_precision_bits_calls() - before == (1 if mode == "float32" else 0)
        same_bits(got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_scatter_with_a_number_or_a_reduction_keeps_the_dtypes_kernel(dtype):
    x, i = sample((9, 12), dtype, seed=1), index((9, 12), 12, 2)
    for _, _ in low_precision_setting.setting("float32"):
        for f in (lambda x, i: torch.scatter(x, 1, i, 1.5), lambda x, i: torch.scatter(x, 1, i, x, reduce="add"),
                  lambda x, i: torch.scatter_add(x, 1, i, x)):
            before = C._low_precision_bits_calls()
            got = f(on_mtia(x), on_mtia(i))
            torch.mtia.synchronize()
            assert C._low_precision_bits_calls() == before
            same_bits(got, f(x, i))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mixed_dtypes_raise_cpus_error_at_the_call(dtype):
    x, i = sample((9, 12), dtype, seed=1), index((9, 12), 12, 2)
    for _, _ in low_precision_setting.setting("float32"):
        with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
            torch.zeros(9, 12, device="mtia").scatter_(1, on_mtia(i), on_mtia(x))
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
            torch.gather(on_mtia(x), 1, on_mtia(i), out=torch.empty(9, 12, device="mtia"))
        same_bits(torch.gather(on_mtia(x), 1, on_mtia(i)), torch.gather(x, 1, i))  # (the device stays usable)
