"""bf16/fp16 add, sub, mul, div (csrc/aten/low_precision/arithmetic.h) through
the vector loops (AVX2 and, on hosts with it, AVX-512) and through CPU's
kernels (OPENMTIA_LOW_PRECISION=native, or no ISA), against CPU PyTorch."""
import operator

import pytest
import torch

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
SIZES = [GRAIN + k for k in (1, 7, 15, 16, 17, 31, 33)] + [C._parallel_work() // 2 + 999]


mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def on_mtia(mode, f, *args, fused=True):
    expect = 1 if mode == "fused" and fused else 0
    return low_precision_setting.on_mtia(C._fused_arithmetic_calls, expect, f, *args).cpu()


def same_bits(x, y):
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x[~x.isnan()].view(torch.int16),
                                                              y[~y.isnan()].view(torch.int16))


def operands(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, generator=g) * 3).to(dtype), (torch.randn(n, generator=g) * 3).to(dtype))


# (name, mtia/CPU call, the float32 formula CPU's vectorized loop computes)
TENSOR_CASES = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    # alpha rounded to the dtype (CPU's), then one fused multiply-add
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=0.3), lambda a, b: fma(b, 0.3, a)),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=1 / 3), lambda a, b: fma(b, -1 / 3, a)),
}


def fma(b, alpha, a):
    """round_float32(a + round_dtype(alpha) * b), b and a float32 holding dtype values"""
    return (a.double() + torch.tensor(alpha).to(DTYPE[0]).double() * b.double()).float()


DTYPE = [None]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", sorted(TENSOR_CASES))
def test_tensor_tensor(case, n, dtype, mode):
    f, formula = TENSOR_CASES[case]
    DTYPE[0] = dtype
    for seed in (0, 1):  # first and later calls
        a, b = operands(n, dtype, seed)
        got, cpu = on_mtia(mode, f, a, b), f(a, b)
        assert got.dtype == dtype and got.shape == cpu.shape
        if mode == "fused":  # float32, one rounding (a fused multiply-add for alpha): CPU's vector loop
            assert same_bits(got, formula(a.float(), b.float()).to(dtype))
        if "alpha" not in case:  # alpha 1: CPU's results bit for bit
            assert same_bits(got, cpu)
        else:  # CPU's scalar tails round alpha * b apart: within a rounding of the terms' size
            scale = (a.float().abs() + b.float().abs()) * torch.finfo(dtype).eps * 2
            assert ((got.float() - cpu.float()).abs() <= scale).all()


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("number", [0.1, 1 / 3, 3, -2, 1e-3, 1e5, 0.0, -0.0])
def test_tensor_number_bits_as_cpu(number, dtype, mode):
    # add/sub take the number rounded to the dtype, mul/div in float32 (CPU's)
    a, _ = operands(GRAIN + 77, dtype, 2)
    ops = (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul), ("div", operator.truediv))
    ops += (("rsub", lambda t, s: s - t),)
    for name, f in ops + (("add_true", lambda t, s: t + True), ("mul_true", lambda t, s: t * True)):
        got, cpu = on_mtia(mode, lambda t: f(t, number), a), f(a, number)
        assert got.dtype == cpu.dtype == dtype
        assert same_bits(got, cpu), (name, number)
    # rsub with alpha: s - alpha * x in one fused multiply-add (CPU's vector
    # loop; its scalar tail rounds alpha * x apart, as add's)
    got = on_mtia(mode, lambda t: torch.rsub(t, number, alpha=0.7), a)
    DTYPE[0] = dtype
    if mode == "fused":
        s = torch.tensor(number).to(dtype).float().expand(a.shape)
        assert same_bits(got, fma(a.float(), -0.7, s).to(dtype))
    scale = (abs(number) + a.float().abs()) * torch.finfo(dtype).eps * 2
    cpu = torch.rsub(a, number, alpha=0.7).float()
    assert ((got.float() == cpu) | ((got.float() - cpu).abs() <= scale)).all()  # (1e5 is inf in fp16)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_in_place_forms(dtype, mode):
    a, b = operands(GRAIN + 5, dtype, 3)
    for name, f in (("add_", lambda x, y: x.add_(y)), ("sub_", lambda x, y: x.sub_(y, alpha=1)),
                    ("mul_", lambda x, y: x.mul_(y)), ("div_", lambda x, y: x.div_(y)),
                    ("add_number", lambda x, y: x.add_(1e-2)), ("mul_number", lambda x, y: x.mul_(0.999)),
                    ("self", lambda x, y: x.add_(x))):
        m, mb = a.to("mtia"), b.to("mtia")
        ptr, version = m.data_ptr(), m._version
        n = C._fused_arithmetic_calls()
        r = f(m, mb)
        torch.mtia.synchronize()
        assert C._fused_arithmetic_calls() - n == (1 if mode == "fused" else 0), name
        assert r is m and m.data_ptr() == ptr and m._version == version + 1, name
        assert same_bits(m.cpu(), f(a.clone(), b)), name


# (x, a row of it): a bias over features, an attention mask over (heads, q, k)
ROW_SHAPES = [((GRAIN // 64 + 1, 64), (64,)), ((171, 200), (1, 200)), ((GRAIN // 1000 + 1, 1000), (1000,)),
              ((4, 65, 129), (65, 129)), ((2, 4, 65, 129), (1, 1, 65, 129)), ((C._parallel_work() // 4096 + 2, 4096), (4096,))]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shapes", ROW_SHAPES, ids=str)
def test_row_broadcast_bits_as_cpu(shapes, dtype, mode):
    # out[i] = x[i] op row[i % row size]: CPU's results bit for bit, in place too
    g = torch.Generator().manual_seed(shapes[1][-1])
    x = (torch.randn(shapes[0], generator=g) * 3).to(dtype)
    row = (torch.randn(shapes[1], generator=g) * 3).to(dtype)
    row.view(-1)[:5] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    for name, f in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul), ("div", operator.truediv),
                    ("add_alpha_1", lambda t, r: torch.add(t, r, alpha=1)), ("add_", lambda t, r: t.add_(r)),
                    ("mul_", lambda t, r: t.mul_(r))):
        for _ in range(2):  # first and later calls
            got, cpu = on_mtia(mode, f, x.clone(), row), f(x.clone(), row)
            assert got.dtype == cpu.dtype and got.shape == cpu.shape, name
            assert same_bits(got, cpu), name


# (x, a column of it): a scale per row (RMSNorm's x * rsqrt(mean), a softmax's 1 / sum)
COLUMN_SHAPES = [((GRAIN // 64 + 1, 64), (GRAIN // 64 + 1, 1)), ((171, 200), (171, 1)), ((4, 65, 129), (4, 65, 1)),
                 ((C._parallel_work() // 4096 + 2, 4096), (C._parallel_work() // 4096 + 2, 1))]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shapes", COLUMN_SHAPES, ids=str)
def test_column_broadcast_bits_as_cpu(shapes, dtype, mode):
    # out[r, j] = x[r, j] op column[r]: CPU's results bit for bit, in place too
    g = torch.Generator().manual_seed(shapes[0][-1])
    x = (torch.randn(shapes[0], generator=g) * 3).to(dtype)
    x.view(-1)[7:12] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    col = (torch.randn(shapes[1], generator=g) * 3).to(dtype)
    col.view(-1)[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30])
    for name, f in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul), ("div", operator.truediv),
                    ("add_alpha_1", lambda t, c: torch.add(t, c, alpha=1)), ("sub_", lambda t, c: t.sub_(c)),
                    ("div_", lambda t, c: t.div_(c)), ("add_alpha", lambda t, c: torch.add(t, c, alpha=0.3))):
        for _ in range(2):  # first and later calls
            got, cpu = on_mtia(mode, f, x.clone(), col), f(x.clone(), col)
            assert got.dtype == cpu.dtype and got.shape == cpu.shape, name
            if name.endswith("_") is False and name != "add_alpha":  # a strided column: x[:, :1]-like
                wide = torch.cat([col, torch.randn(col.shape).to(dtype)], -1)
                got2, cpu2 = on_mtia(mode, lambda t, w: f(t, w[..., :1]), x.clone(), wide), f(x.clone(), wide[..., :1])
                assert same_bits(got2, cpu2), name
            if name == "add_alpha" and mode == "fused":  # (CPU's scalar tail of each row rounds alpha * c on its own:
                # against its vector loop's formula, one fused multiply-add in float32)
                alpha = torch.tensor(0.3).to(dtype).double()
                assert same_bits(got, (x.double() + alpha * col.double()).float().to(dtype)), name
            else:
                assert same_bits(got, cpu), name


CLAMPS = {
    "clamp": lambda t: t.clamp(-0.7, 1.3),  # bounds rounded to the dtype
    "clamp_min": lambda t: t.clamp(min=0.0),  # -0.0 stays -0.0, as CPU's max(min, x)
    "clamp_max": lambda t: t.clamp(max=-0.0),
    "clamp_min_op": lambda t: torch.clamp_min(t, 0.1),
    "clamp_max_op": lambda t: torch.clamp_max(t, 2),
    "crossed_bounds": lambda t: t.clamp(1.0, -1.0),  # every element becomes max
    "infinite_bounds": lambda t: t.clamp(-float("inf"), float("inf")),
    "integer_bounds": lambda t: t.clamp(-1, 3),
    "bounds_past_a_value": lambda t: t.clamp(min=1e-3, max=6e4),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", [GRAIN + 1, GRAIN + 17, C._parallel_work() // 2 + 999])
@pytest.mark.parametrize("case", sorted(CLAMPS))
def test_clamp_bits_as_cpu(case, n, dtype, mode):
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.3, -0.7, 1.0, -1.0, 0.1, 2.0]
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3).to(dtype)
    x[: len(special)] = torch.tensor(special)
    x[-len(special):] = torch.tensor(special)  # in the tail too
    for _ in range(2):  # first and later calls
        got, cpu = on_mtia(mode, CLAMPS[case], x), CLAMPS[case](x)
        assert got.dtype == cpu.dtype == dtype and got.shape == cpu.shape
        assert same_bits(got, cpu), case


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_clamps_the_loops_do_not_take(dtype, mode):
    # a NaN bound (CPU's vector and scalar loops differ), a bound the dtype
    # cannot hold (CPU raises, at the call): CPU's kernels (tensor bounds:
    # test_tensor_lerp_and_clamp_bits_as_cpu)
    x = torch.randn(GRAIN + 5).to(dtype)
    for f in (lambda t: t.clamp(min=float("nan")),):
        got, cpu = on_mtia(mode, f, x, fused=False), f(x)
        assert got.dtype == cpu.dtype and torch.equal(got.isnan(), cpu.isnan())
    big = 1e39 if dtype == torch.bfloat16 else 7e4
    with pytest.raises(RuntimeError) as cpu_error:
        x.clamp(max=big)
    with pytest.raises(RuntimeError) as mtia_error:
        x.to("mtia").clamp(max=big)
    assert str(mtia_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        x.to("mtia").clamp()
    assert same_bits(on_mtia(mode, lambda t: t.clamp(0, 1), x), x.clamp(0, 1))  # still usable


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("weight", [0.1, 1 / 3, 0.5, 0.9, -0.7, 1.5, 0.0, 1.0, float("nan")])
def test_lerp_bits_as_cpu(weight, dtype, mode):
    # CPU's vector formula (weight < 0.5: start + w * d, else end - (1 - w) * d,
    # one fused multiply-add, the weight in float32), in place (an optimizer's
    # lerp_) and functional
    a, b = operands(GRAIN + 77, dtype, 7)
    a[:4] = torch.tensor([float("inf"), float("nan"), -0.0, 0.0])
    b[:4] = torch.tensor([float("inf"), 1.0, 0.0, -0.0])
    got = on_mtia(mode, lambda x, y: torch.lerp(x, y, weight), a, b)
    assert same_bits(got, torch.lerp(a, b, weight))
    m = a.to("mtia")
    ptr, version = m.data_ptr(), m._version
    n = C._fused_arithmetic_calls()
    r = m.lerp_(b.to("mtia"), weight)
    torch.mtia.synchronize()
    assert C._fused_arithmetic_calls() - n == (1 if mode == "fused" else 0)
    assert r is m and m.data_ptr() == ptr and m._version == version + 1
    assert same_bits(m.cpu(), a.clone().lerp_(b, weight))
    # broadcast ends, partly overlapping operands: CPU's kernel (and its error)
    for f in (lambda x, y: torch.lerp(x, y[:1], 0.3), lambda x, y: torch.lerp(x, y, torch.full_like(x[:1], 0.3))):
        got = on_mtia(mode, f, a, b, fused=False)
        assert same_bits(got, f(a, b))
    with pytest.raises(RuntimeError, match="unsupported operation"):
        m = torch.cat([a, a]).to("mtia")
        m[1:GRAIN + 78].lerp_(m[:GRAIN + 77], 0.3)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_specials(dtype, mode):
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, torch.finfo(dtype).max,
               -torch.finfo(dtype).max, torch.finfo(dtype).tiny, 1e-40, 3.0]
    a = torch.tensor(special * 3000).to(dtype)
    b = torch.tensor((special[5:] + special[:5]) * 3000).to(dtype)
    for f in (operator.add, operator.sub, operator.mul, operator.truediv):
        got, cpu = on_mtia(mode, f, a, b), f(a, b)
        assert same_bits(got, cpu)  # overflow to inf, inf - inf, 0 / 0, signed zeros


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    a, b = (t.view(300, 200) for t in operands(300 * 200, dtype, 4))
    cases = [
        (operator.add, a[:10], b[:10]),  # small: CPU's kernel, bit for bit
        (operator.mul, a.t(), b.t()),  # not contiguous
        (operator.add, a, b.float()),  # mixed dtypes: float32 result
        (operator.sub, a.view(-1, 50), b.view(-1, 50)[:, :1].contiguous()),  # a column of rows under 64 elements
        (operator.add, a.view(-1, 50), b.view(-1, 50)[:1]),  # a row of fewer than 64 elements
        (lambda x, y: x * y[:, 0], a, b.view(200, 300)),  # a strided row
        (operator.add, b[0], a),  # the row first
        (lambda x, y: x * (1 + 2j), a, b),  # a complex number
        (lambda x, y: torch.add(x, y, alpha=2), a, torch.ones(300, 200, dtype=dtype)),
    ]
    for i, (f, x, y) in enumerate(cases):
        got, cpu = on_mtia(mode, f, x, y, fused=i == 8), f(x, y)
        assert got.dtype == cpu.dtype and got.shape == cpu.shape
        torch.testing.assert_close(got, cpu, msg=str(i))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    a, b = operands(GRAIN + 5, dtype, 5)
    c = b[:-1]
    for f in (lambda x, y: x + y, lambda x, y: x.add_(y), lambda x, y: torch.add(x, y, alpha=1.5j),
              lambda x, y: torch.add(x, x, alpha=1.5j), lambda x, y: torch.add(x, x, alpha=True),
              lambda x, y: x - True, lambda x, y: x.sub_(True), lambda x, y: x[:10] - True, lambda x, y: True - x,
              lambda x, y: torch.rsub(x, 2, alpha=True),
              lambda x, y: torch.sub(x[:10], x[:10], alpha=True)):
        with pytest.raises(RuntimeError) as cpu_error:
            f(a.clone(), c)
        with pytest.raises(RuntimeError) as mtia_error:
            f(a.to("mtia"), c.to("mtia"))
        assert str(mtia_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a.to("mtia") * b
    with pytest.raises(RuntimeError, match="unsupported operation"):  # partly overlapping in-place operands
        m = torch.cat([a, a]).to("mtia")
        m[1:GRAIN + 6].add_(m[:GRAIN + 5])
    assert same_bits(on_mtia(mode, operator.mul, a, b), a * b)  # the device stays usable


@pytest.mark.parametrize("op", ["addcmul_", "addcdiv_"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_addcmul_addcdiv_in_place_match_cpu(dtype, n, op, mode):
    """An optimizer's addcmul_/addcdiv_ (exp_avg_sq.addcmul_(g, g, value=1 -
    beta2)): in float32, rounded once, CPU's results within the dtype's
    tolerance; NaN, inf and a division by zero as on CPU; self written in
    place (also where t1 is self)."""
    g = torch.Generator().manual_seed(n)
    s, t1, t2 = ((torch.randn(n, generator=g) * 3).to(dtype) for _ in range(3))
    t1[5], t1[6], t2[7], t2[8] = float("nan"), float("inf"), 0.0, -0.0
    for value in (1, 0.001, -2.5):
        f = lambda s, a, b: getattr(s, op)(a, b, value=value)
        cpu = f(s.clone(), t1, t2)
        m = s.to("mtia")
        ptr = m.data_ptr()
        n0 = C._fused_arithmetic_calls()
        r = f(m, t1.to("mtia"), t2.to("mtia"))
        torch.mtia.synchronize()
        assert C._fused_arithmetic_calls() - n0 == (1 if mode == "fused" else 0)
        assert r is m and m.data_ptr() == ptr
        got = m.cpu()
        assert torch.equal(got.isnan(), cpu.isnan()) and torch.equal(got.isinf(), cpu.isinf())
        torch.testing.assert_close(got, cpu, equal_nan=True)
    # t1 is self
    cpu = s.clone().addcmul_(s, t2, value=0.5)
    m = s.to("mtia")
    m.addcmul_(m, t2.to("mtia"), value=0.5)
    torch.testing.assert_close(m.cpu(), cpu, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_addcmul_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    s, t1 = operands(GRAIN + 100, dtype, 3)
    t2 = torch.randn(GRAIN + 100).to(dtype)
    calls = {
        "broadcast": lambda s, a, b: s.addcmul_(a, b[:1]),
        "float32_t2": lambda s, a, b: s.addcdiv_(a, b.float().abs() + 1),
        "strided": lambda s, a, b: s[::2].addcmul_(a[::2], b[::2]),
    }
    for name, f in calls.items():
        want = f(s.clone(), t1, t2)
        n0 = C._fused_arithmetic_calls()
        m = s.to("mtia")
        f(m, t1.to("mtia"), t2.to("mtia"))
        torch.mtia.synchronize()
        assert C._fused_arithmetic_calls() == n0, name
        torch.testing.assert_close(m.cpu() if name != "strided" else m.cpu()[::2], want, msg=name)


def three(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x, y, z = ((torch.randn(n, generator=g) * 3).to(dtype) for _ in range(3))
    edge = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 0.25]
    for t, k in ((x, 0), (y, 3), (z, 5)):  # specials in each operand, at different places
        t[k * 8: k * 8 + 8] = torch.tensor(edge[k % 8:] + edge[:k % 8])
    return x, y, z


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", [GRAIN + 1, GRAIN + 17, C._parallel_work() // 2 + 999])
def test_tensor_lerp_and_clamp_bits_as_cpu(n, dtype, mode):
    # lerp with a tensor weight (CPU's vector formula per element) and clamp
    # with tensor bounds (minimum(maximum(x, lo), hi), NaN where any operand
    # is; crossed bounds give hi), one bound (maximum / minimum): CPU's bits
    x, y, w = three(n, dtype, n)
    w = torch.where(torch.arange(n) % 3 == 0, w, (w * 0.2).to(dtype))  # weights on both sides of 0.5
    lo, hi = y, (y + w.abs() * (torch.arange(n) % 5 != 0)).to(dtype)  # some bounds equal
    hi = torch.where(torch.arange(n) % 7 == 0, y - 1, hi).to(dtype)  # some crossed
    for name, f, args in (("lerp", torch.lerp, (x, y, w)), ("clamp", torch.clamp, (x, lo, hi)),
                          ("clamp_min", lambda a, b: torch.clamp(a, min=b), (x, lo)),
                          ("clamp_max", lambda a, b: torch.clamp(a, max=b), (x, hi))):
        for _ in range(2):  # first and later calls
            fused = name in ("lerp", "clamp")
            n0, a0 = C._fused_arithmetic_calls(), C._fused_activation_calls()
            got = f(*(t.to("mtia") for t in args))
            torch.mtia.synchronize()
            calls = C._fused_arithmetic_calls() - n0 if fused else C._fused_activation_calls() - a0
            assert calls == (1 if mode == "fused" else 0), name
            assert same_bits(got.cpu(), f(*args)), name


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
def test_functional_addcmul_addcdiv_match_cpu(op, dtype, mode):
    # the in-place loop into a fresh tensor: CPU's results within the dtype's tolerance
    s, t1, t2 = three(GRAIN + 33, dtype, 11)
    for value in (1, 0.001, -2.5):
        f = lambda s, a, b: getattr(torch, op)(s, a, b, value=value)
        n0 = C._fused_arithmetic_calls()
        m = s.to("mtia")
        got = f(m, t1.to("mtia"), t2.to("mtia"))
        torch.mtia.synchronize()
        assert C._fused_arithmetic_calls() - n0 == (1 if mode == "fused" else 0)
        assert torch.equal(m.cpu().view(torch.int16), s.view(torch.int16))  # self untouched
        cpu = f(s, t1, t2)
        got = got.cpu()
        assert got.dtype == cpu.dtype and torch.equal(got.isnan(), cpu.isnan()) and torch.equal(got.isinf(), cpu.isinf())
        torch.testing.assert_close(got, cpu, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_ternary_calls_the_loops_do_not_take(dtype, mode):
    x, y, z = three(GRAIN + 5, dtype, 12)
    cases = [
        lambda a, b, c: torch.lerp(a, b, c.float()),           # mixed dtypes: CPU's error
        lambda a, b, c: torch.clamp(a, b[:1], c),              # a broadcast bound
        lambda a, b, c: torch.clamp(a, b.float(), c.float()),  # float32 bounds: a float32 result
        lambda a, b, c: torch.addcmul(a, b[::2], c[::2].clone()[:1]),
    ]
    for i, f in enumerate(cases):
        try:
            want = f(x, y, z)
        except RuntimeError as e:
            with pytest.raises(RuntimeError) as err:
                f(x.to("mtia"), y.to("mtia"), z.to("mtia"))
            assert str(err.value) == str(e)
            continue
        n0 = C._fused_arithmetic_calls()
        got = f(x.to("mtia"), y.to("mtia"), z.to("mtia")).cpu()
        assert C._fused_arithmetic_calls() == n0, i
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.clamp(x.to("mtia"), y, z.to("mtia"))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_clamp_with_tensor_bounds_of_every_pattern(dtype, mode):
    # x takes each bit pattern against bounds of signed zeros, infinities,
    # NaN, crossed and equal values: CPU's bits (the dtype's NaN where any
    # operand is NaN)
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    for lo, hi in ((0.0, -0.0), (-0.0, 0.0), (-1.0, 1.0), (1.0, -1.0), (-float("inf"), float("inf")),
                   (float("nan"), 1.0), (2.0, float("nan")), (0.5, 0.5), (-3.0, -0.0)):
        lo_t, hi_t = torch.full_like(x, lo), torch.full_like(x, hi)
        n0 = C._fused_arithmetic_calls()
        got = torch.clamp(x.to("mtia"), lo_t.to("mtia"), hi_t.to("mtia"))
        torch.mtia.synchronize()
        assert C._fused_arithmetic_calls() - n0 == (1 if mode == "fused" else 0)
        assert same_bits(got.cpu(), torch.clamp(x, lo_t, hi_t)), (lo, hi)
