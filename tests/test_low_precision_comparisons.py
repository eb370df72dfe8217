"""bf16/fp16 comparisons (csrc/aten/low_precision/comparisons.h) through the
vector loops (AVX2 and, on hosts with it, AVX-512) and through CPU's kernels
(OPENMTIA_LOW_PRECISION=native, or no ISA), against CPU PyTorch: bit for
bit, NaN and infinities included."""
import operator

import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
SIZES = [GRAIN + k for k in (1, 7, 15, 16, 17, 33)] + [C._parallel_work() + 999]
OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
       "ne": operator.ne}
FUNCS = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def check(mode, f, *args, fused=True):
    got = low_precision_setting.on_mtia(C._fused_comparison_calls, 1 if mode == "fused" and fused else 0, f, *args)
    want = f(*args)
    assert got.device.type == "mtia" and got.dtype == torch.bool and got.shape == want.shape
    assert torch.equal(got.cpu(), want)


def values(n, dtype, seed):
    # few distinct values (many equal pairs), specials among them
    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.1, 2.5, float("inf"), -float("inf"), float("nan"),
                         torch.finfo(dtype).max, torch.finfo(dtype).tiny, 256.0, 257.0, 1e-40])
    return pool[torch.randint(len(pool), (n,), generator=g)].to(dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_tensor_tensor_match_cpu(op, n, dtype, mode):
    for seed in (0, 1):  # first and later calls
        check(mode, OPS[op], values(n, dtype, seed), values(n, dtype, seed + 10))
    check(mode, FUNCS[op], values(n, dtype, 2), values(n, dtype, 3))


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_tensor_number_match_cpu(op, dtype, mode):
    # the number is rounded to the dtype first (0.1, 257, 1/3), overflows to
    # inf (1e40, 70000 in fp16), ints and bools too
    x = values(GRAIN + 77, dtype, 4)
    for number in (0.1, 257, 1 / 3, 1e40, -1e40, 70000.0, 65519, 0, -0.0, True, float("nan"), float("inf"), 2):
        check(mode, lambda t, s=number: OPS[op](t, s), x)
        check(mode, lambda t, s=number: FUNCS[op](t, s), x)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = values(300 * 200, dtype, 5).view(300, 200)
    y = values(300 * 200, dtype, 6).view(300, 200)
    check(mode, operator.gt, x[:10], y[:10], fused=False)  # small: CPU's kernel
    check(mode, operator.gt, x.t(), y.t(), fused=False)  # not contiguous
    check(mode, operator.lt, x, y.float(), fused=False)  # mixed dtypes
    check(mode, operator.eq, x, y[:1], fused=False)  # broadcast
    check(mode, operator.ne, x, 1 + 2j, fused=False)  # a complex number


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    x = values(GRAIN + 5, dtype, 7)
    y = values(GRAIN + 6, dtype, 8)
    with pytest.raises(RuntimeError) as cpu_error:
        x > y
    with pytest.raises(RuntimeError) as mtia_error:
        x.to("mtia") > y.to("mtia")
    assert str(mtia_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x.to("mtia") > x
    check(mode, operator.gt, x, x.flip(0))  # the device stays usable
