"""The unboxed launch path of small pointwise ops (csrc/aten/pointwise.cpp): unary
ops, add/sub/mul/div with a tensor or a Python number and their in-place forms:
CPU's results bit for bit in every floating dtype, asynchronous, the operands
taken at the call, and the boxed fallback for every other call."""
import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def special_values(n, dtype):
    x = torch.randn(n, dtype=dtype) * 10 ** torch.randint(-40, 40, (n,)).to(dtype)
    vals = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-310, -1e-45, 3.4e38], dtype=dtype)
    x[: min(n, len(vals))] = vals[: min(n, len(vals))]
    return x


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 64, 1000, 32768])
def test_the_unboxed_path_equals_cpu_bit_for_bit(op, dtype, n):
    a, b = special_values(n, dtype), special_values(n, dtype).flip(0)
    expected = OPS[op](a, b)
    got = OPS[op](a.to("mtia"), b.to("mtia")).cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # bitwise: NaNs and signed zeros included
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    assert torch.equal(got.view(bits), expected.view(bits))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", ["broadcast", "noncontiguous", "int64", "mixed dtype", "bfloat16", "python number",
                                  "large"])
def test_other_calls_take_the_boxed_fallback_and_equal_cpu(op, case):
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(8, 6) + 3
    kwargs = {}
    if case == "broadcast":
        b = b[:1]
    elif case == "noncontiguous":
        a, b = a.t(), b.t()
    elif case == "int64":
        a, b = (a * 10).long(), (b * 10).long() + 100
    elif case == "mixed dtype":
        b = b.double()
    elif case == "bfloat16":
        a, b = a.bfloat16(), b.bfloat16()
    elif case == "large":
        a, b = torch.randn(40000), torch.randn(40000) + 3
    fn = getattr(torch, op)
    if case == "python number":
        expected, got = fn(a, 2.5), fn(a.to("mtia"), 2.5).cpu()
    else:
        expected, got = fn(a, b, **kwargs), fn(a.to("mtia"), b.to("mtia"), **kwargs).cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", ["add", "sub"])
def test_alpha_other_than_one_takes_the_boxed_fallback(op):
    a, b = torch.randn(64), torch.randn(64)
    fn = getattr(torch, op)
    torch.testing.assert_close(fn(a.to("mtia"), b.to("mtia"), alpha=0.3).cpu(), fn(a, b, alpha=0.3), rtol=0, atol=0)


@pytest.mark.needs_async
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_the_unboxed_path_is_asynchronous(op):
    x = torch.ones(64, device="mtia")
    torch.mtia.synchronize()
    gate = openmtia._C_test.launch_blocking_task(0)
    try:
        y = getattr(torch, op)(x, x)  # returns although the stream is held
        assert not torch.mtia.current_stream().query()
    finally:
        gate.release()
    assert torch.equal(y.cpu(), getattr(torch, op)(torch.ones(64), torch.ones(64)))


def test_device_mismatch_and_autograd_are_unchanged():
    a = torch.randn(4, device="mtia", requires_grad=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.randn(4)
    if torch.mtia.device_count() > 1:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            a + torch.randn(4, device="mtia:1")
    b = torch.randn(4, device="mtia", requires_grad=True)
    ((a * b) / (a + b) - b).sum().backward()
    ac, bc = a.detach().cpu().requires_grad_(), b.detach().cpu().requires_grad_()
    ((ac * bc) / (ac + bc) - bc).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ac.grad)
    torch.testing.assert_close(b.grad.cpu(), bc.grad)


def test_while_capturing_the_boxed_path_prebuilds_the_kernel():
    x = torch.ones(64, device="mtia")
    before = openmtia._C._prebuilt_kernel_count()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        y = x + x
    # (prebuilding reads device memory on the host: none where the host may not, OPENMTIA_STRICT_MEMORY=1)
    made = 1 if torch.mtia.get_device_properties(0)["host_addressable"] else 0
    assert openmtia._C._prebuilt_kernel_count() == before + made
    x.fill_(3)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((64,), 6.0))


UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv",
         "reciprocal", "floor", "ceil", "round", "trunc", "frac", "sign", "silu", "lgamma", "digamma", "i0", "sinc",
         "relu"]
FLOATING = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16, torch.float16: torch.int16,
        **{t: t for t in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)}}


def lookups():
    """Plan-cache lookups so far: the boxed fallback makes one per call, the unboxed path none."""
    s = openmtia._C._plan_cache_stats()
    return s["hits"] + s["misses"]


def fn_of(name):
    return getattr(torch.special, name) if name in ("i0",) else getattr(torch, name) if hasattr(torch, name) \
        else getattr(torch.nn.functional, name)


def assert_bitwise(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.device.type == "cpu"
    assert torch.equal(got.view(BITS[got.dtype]), expected.view(BITS[expected.dtype])), (got, expected)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", FLOATING)
def test_unary_ops_take_the_unboxed_path_with_cpus_bits(name, dtype):
    fn = fn_of(name)
    for n in (1, 37, 32768):  # 32768: GRAIN_SIZE, the last size CPU runs on one thread
        x = special_values(n, torch.float32).to(dtype)
        if name in ("acosh",):
            x = x.abs() + 1
        expected = fn(x)
        mx = x.to("mtia")
        torch.mtia.synchronize()
        before = lookups()
        got = fn(mx)
        assert lookups() == before, "took the boxed fallback"
        assert_bitwise(got.cpu(), expected)


@pytest.mark.parametrize("dtype", FLOATING)
def test_python_numbers_and_in_place_forms_take_the_unboxed_path_with_cpus_bits(dtype):
    x, y = special_values(50, torch.float32).to(dtype), special_values(50, torch.float32).flip(0).to(dtype)
    cases = [
        lambda a, b: a * 2, lambda a, b: a + 1.5, lambda a, b: a - 3, lambda a, b: a / 7.0, lambda a, b: a * True,
        lambda a, b: torch.add(a, 2.5, alpha=3), lambda a, b: torch.sub(a, b, alpha=0.5),
        lambda a, b: a.clone().add_(1.25), lambda a, b: a.clone().mul_(b), lambda a, b: a.clone().sub_(b, alpha=2),
        lambda a, b: a.clone().div_(0.0), lambda a, b: a.clone().div_(b), lambda a, b: a.clone().add_(a[:]),
    ]
    for i, case in enumerate(cases):
        expected = case(x, y)
        mx, my = x.to("mtia"), y.to("mtia")
        torch.mtia.synchronize()
        got = case(mx, my)
        assert_bitwise(got.cpu(), expected)
    mx, my = x.to("mtia"), y.to("mtia")
    torch.mtia.synchronize()
    before = lookups()
    z = mx * 2
    mx.add_(my)
    mx.mul_(0.5)
    w = torch.exp(z) - 1
    assert lookups() == before, "took the boxed fallback"
    assert_bitwise(mx.cpu(), (x + y) * 0.5)
    assert_bitwise(w.cpu(), torch.exp(x * 2) - 1)


def test_in_place_operands_that_partly_overlap_raise_at_the_call():
    x = torch.randn(64, device="mtia")
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                           "written-to tensor refer to a single memory location"):
        x[1:].add_(x[:-1])
    xc = x.cpu()
    x.add_(x)  # the same elements: fine, as on CPU
    assert torch.equal(x.cpu(), xc + xc)


@pytest.mark.needs_async
def test_the_operands_are_taken_at_the_call():
    # the task runs later: metadata the host changes after the call (t_(),
    # resize_, set_) must not change what it computes
    a = torch.randn(6, 5)
    b = torch.randn(6, 5)
    x, y = a.to("mtia"), b.to("mtia")
    torch.mtia.synchronize()
    gate = openmtia._C_test.launch_blocking_task(0)
    try:
        e = torch.exp(x)
        s = x * y
        x.add_(1.0)
        assert not torch.mtia.current_stream().query()
        x.t_()
        y.resize_(2)
        y.set_(torch.zeros(3, device="mtia"))
    finally:
        gate.release()
    assert_bitwise(e.cpu(), torch.exp(a))
    assert_bitwise(s.cpu(), a * b)
    assert_bitwise(x.cpu(), (a + 1.0).t())


def test_fill_raises_a_bad_value_at_the_call_and_zero_fills_any_layout():
    x = torch.zeros(4, dtype=torch.int8, device="mtia")
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
        x.fill_(1000)
    # what CPU converts, mtia converts alike (uint8 wraps -1)
    assert torch.equal(torch.zeros(3, dtype=torch.uint8, device="mtia").fill_(-1).cpu(),
                       torch.zeros(3, dtype=torch.uint8).fill_(-1))
    y = torch.randn(5, 6, device="mtia")
    y[:, 1].zero_()
    y.t()[2].fill_(-0.0)
    yc = y.cpu()
    assert torch.equal(yc[:, 1], torch.zeros(5)) and torch.equal(yc[:, 2], torch.zeros(5))
    assert torch.equal(x.cpu(), torch.zeros(4, dtype=torch.int8))


BINARY = ["maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "copysign", "fmod", "remainder", "pow", "nextafter",
          "xlogy"]
COMPARE = ["lt", "le", "gt", "ge", "eq", "ne"]


def unboxed_equals_cpu(fn, *cpu_args, close=False):
    """fn over mtia copies of cpu_args takes the unboxed path and gives CPU's
    bits (close: CPU's results within an ulp or so, NaN where CPU's is, of any
    sign: CPU's own softmax over a dim that is not the last differs so from
    itself as its loops split the elements between vector and scalar code,
    which varies with the process's state)."""
    expected = fn(*cpu_args)
    args = [a.to("mtia") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    torch.mtia.synchronize()
    before = lookups()
    got = fn(*args)
    assert lookups() == before, "took the boxed fallback"
    got = got.cpu()
    if expected.dtype == torch.bool:
        assert got.dtype == torch.bool and torch.equal(got, expected)
    elif close:
        assert got.dtype == expected.dtype and torch.equal(got.isnan(), expected.isnan())
        torch.testing.assert_close(got, expected, equal_nan=True, atol=0, rtol=4 * torch.finfo(got.dtype).eps)
    else:
        assert_bitwise(got, expected)
    return args


@pytest.mark.parametrize("dtype", FLOATING)
def test_in_place_unary_ops_take_the_unboxed_path_with_cpus_bits(dtype):
    for name in UNARY:
        x = special_values(45, torch.float32).to(dtype)
        if name == "acosh":
            x = x.abs() + 1
        op = getattr(torch.ops.aten, name + "_")
        args = unboxed_equals_cpu(lambda t: op(t.clone()) if t.device.type == "cpu" else op(t), x)
        assert args[0].cpu().dtype == dtype  # in place: the argument holds the result


@pytest.mark.parametrize("dtype", FLOATING)
def test_binary_ops_comparisons_numbers_and_reductions_take_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(77, torch.float32).to(dtype)
    y = special_values(77, torch.float32).flip(0).to(dtype)
    y[::5] = x[::5]  # equal elements for the comparisons
    for name in BINARY:
        unboxed_equals_cpu(getattr(torch, name), x, y)
    for name in COMPARE:
        unboxed_equals_cpu(getattr(torch, name), x, y)
        for number in (0, 0.5, -1, float("nan"), True):
            unboxed_equals_cpu(lambda t: getattr(torch, name)(t, number), x)
    for fn in (lambda t: t ** 2, lambda t: t ** 0.5, lambda t: torch.pow(t, -3), lambda t: torch.clamp_min(t, 0.1),
               lambda t: torch.clamp_max(t, -0.25), lambda t: torch.fmod(t, 1.5), lambda t: torch.remainder(t, -2),
               lambda t: torch.clamp(t, -1, 2), lambda t: torch.clamp(t, min=0.5), lambda t: torch.clamp(t, max=0),
               lambda t: torch.clamp(t, 3, -3)):
        unboxed_equals_cpu(fn, x)
    for shape in [(1,), (7, 9), (4, 8, 16)]:
        z = special_values(shape[0] * (shape[1] if len(shape) > 1 else 1) * (shape[2] if len(shape) > 2 else 1),
                           torch.float32).to(dtype).view(shape)
        finite = torch.where(z.isfinite(), z, torch.zeros((), dtype=dtype)).clamp(-1000, 1000)
        for t in (z, finite):
            unboxed_equals_cpu(torch.sum, t)
            unboxed_equals_cpu(torch.amax, t)
            unboxed_equals_cpu(torch.amin, t)


def test_other_calls_of_the_new_families_take_the_boxed_fallback_and_equal_cpu():
    a, b = torch.randn(6, 5), torch.randn(5)
    cases = [lambda x, y: torch.maximum(x, y), lambda x, y: x < y, lambda x, y: torch.sum(x, dtype=torch.float64),
             lambda x, y: x.amax(0), lambda x, y: x.long() > 0, lambda x, y: x.t() ** 2, lambda x, y: x.t().exp_()]
    for case in cases:
        expected = case(a.clone(), b)
        got = case(a.to("mtia"), b.to("mtia")).cpu()
        assert got.dtype == expected.dtype and got.stride() == expected.stride()
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATING)
def test_an_optimizers_in_place_ops_take_the_unboxed_path_with_cpus_bits(dtype):
    p, g, v = (special_values(40, torch.float32).to(dtype) for _ in range(3))
    v = v.abs() + 0.1
    for case in (lambda a, b, c: a.clone().addcmul_(b, b, value=-0.01),
                 lambda a, b, c: a.clone().addcdiv_(b, c, value=0.3),
                 lambda a, b, c: a.clone().lerp_(b, 0.1),
                 lambda a, b, c: a.clone().fill_(-2.5),
                 lambda a, b, c: a.clone().zero_()):
        unboxed_equals_cpu(case, p, g, v)


def test_clamp_without_bounds_and_overlapping_in_place_operands_raise_at_the_call():
    x = torch.randn(16, device="mtia")
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(x)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x[1:].addcmul_(x[:-1], x[:-1])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x[1:].lerp_(x[:-1], 0.5)
    torch.mtia.synchronize()


INTEGRAL = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def integers(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    x = torch.randint(max(info.min, -1000), min(info.max, 1000), (n,), generator=g).to(dtype)
    extremes = torch.tensor([info.min, info.max, 0, 1], dtype=torch.int64).to(dtype)
    x[: min(n, 4)] = extremes[: min(n, 4)]  # overflow wraps as on CPU
    return x


@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_integer_tensors_take_the_unboxed_path_where_their_dtype_rule_is_plain(dtype):
    x, y = integers(50, dtype, 0), integers(50, dtype, 1)
    y[::4] = x[::4]  # equal elements for the comparisons
    for fn in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: torch.add(a, b, alpha=3),
               lambda a, b: torch.sub(a, b, alpha=-2), lambda a, b: torch.maximum(a, b), lambda a, b: torch.minimum(a, b),
               lambda a, b: a.clone().add_(b) if a.device.type == "cpu" else a.add_(b),
               lambda a, b: a.clone().mul_(b) if a.device.type == "cpu" else a.mul_(b)):
        unboxed_equals_cpu(fn, x, y)
    for name in COMPARE:
        unboxed_equals_cpu(getattr(torch, name), x, y)
        for number in (0, 7, -1, 2.5, True):
            unboxed_equals_cpu(lambda t: getattr(torch, name)(t, number), x)
    for fn in (lambda t: t + 3, lambda t: t * 2, lambda t: t - 1000, torch.abs, torch.neg, torch.relu, torch.amax,
               torch.amin, lambda t: t.clone().neg_() if t.device.type == "cpu" else t.neg_()):
        unboxed_equals_cpu(fn, x)
    if dtype == torch.int64:
        unboxed_equals_cpu(torch.sum, x)
        unboxed_equals_cpu(torch.sum, torch.full((100,), 2 ** 62, dtype=torch.int64))  # wraps as on CPU


def test_bool_tensors_take_the_unboxed_path_for_comparisons_and_add_mul():
    a = torch.tensor([True, False, True, False] * 8)
    b = torch.tensor([True, True, False, False] * 8)
    for fn in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: torch.add(x, y, alpha=1),
               lambda x, y: x.clone().mul_(y) if x.device.type == "cpu" else x.mul_(y)):
        unboxed_equals_cpu(fn, a, b)
    for name in COMPARE:
        unboxed_equals_cpu(getattr(torch, name), a, b)
        unboxed_equals_cpu(lambda t: getattr(torch, name)(t, 0.5), a)


def test_integer_and_bool_calls_with_other_dtype_rules_keep_the_boxed_path_and_cpus_results_and_errors():
    x, y = integers(40, torch.int32, 0), integers(40, torch.int32, 1).abs() + 1
    b = torch.tensor([True, False] * 20)
    cases = [lambda p, q, c: p / q,  # true division: float
             lambda p, q, c: p + 2.5,  # a float number: float
             lambda p, q, c: p * 1.5,
             lambda p, q, c: p.sum(),  # int32 sums to int64
             lambda p, q, c: p.to(torch.int64) + q,  # mixed dtypes promote
             lambda p, q, c: torch.maximum(c, c), lambda p, q, c: c.sum()]
    for case in cases:
        expected = case(x, y, b)
        got = case(x.to("mtia"), y.to("mtia"), b.to("mtia")).cpu()
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert torch.equal(got, expected)
    for bad in (lambda p, q, c: c - c, lambda p, q, c: -c, lambda p, q, c: torch.add(p, q, alpha=0.5),
                lambda p, q, c: p.add_(2.5)):
        with pytest.raises(RuntimeError) as cpu_error:
            bad(x.clone(), y, b)
        with pytest.raises(RuntimeError) as mtia_error:  # at the call, with CPU's message
            bad(x.to("mtia"), y.to("mtia"), b.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=str)
def test_bitwise_ops_of_integer_and_bool_tensors_take_the_unboxed_path(dtype):
    if dtype == torch.bool:
        x, y = torch.tensor([True, False, True, False] * 9), torch.tensor([True, True, False, False] * 9)
    else:
        x, y = integers(36, dtype, 0), integers(36, dtype, 1)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor, lambda a, b: a & b, lambda a, b: a | b,
               lambda a, b: a ^ b):
        unboxed_equals_cpu(fn, x, y)
    for fn in (torch.bitwise_not, lambda a: ~a, torch.logical_not):
        unboxed_equals_cpu(fn, x)


@pytest.mark.parametrize("dtype", FLOATING + [torch.int64, torch.bool], ids=str)
def test_where_takes_the_unboxed_path_with_cpus_bits(dtype):
    cond = torch.tensor([True, False, False, True, True] * 7)
    if dtype.is_floating_point:
        x, y = special_values(35, torch.float32).to(dtype), special_values(35, torch.float32).flip(0).to(dtype)
    elif dtype == torch.bool:
        x, y = cond.flip(0), cond.roll(1)
    else:
        x, y = integers(35, dtype, 0), integers(35, dtype, 1)
    unboxed_equals_cpu(torch.where, cond, x, y)
    unboxed_equals_cpu(lambda c, a, b: a.where(c, b), cond, x, y)
    if dtype.is_floating_point:
        unboxed_equals_cpu(torch.logical_not, x)


def test_other_logic_and_where_calls_keep_the_boxed_path_with_cpus_results_and_errors():
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    c = x > 0
    for case in (lambda c, a, b: torch.where(c, a, b.double()),  # promotion
                 lambda c, a, b: torch.where(c.t(), a.t(), b.t()),  # non-contiguous
                 lambda c, a, b: (a > 0).long() & c.long(),
                 lambda c, a, b: torch.logical_not(a.t())):
        expected = case(c, x, y)
        got = case(c.to("mtia"), x.to("mtia"), y.to("mtia")).cpu()
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    for bad in (lambda c, a, b: a & b, lambda c, a, b: torch.bitwise_not(a), lambda c, a, b: torch.where(c.long(), a, b),
                lambda c, a, b: c & a):
        with pytest.raises(RuntimeError) as cpu_error:
            bad(c, x, y)
        with pytest.raises(RuntimeError) as mtia_error:  # at the call, with CPU's message
            bad(c.to("mtia"), x.to("mtia"), y.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_masked_fill_takes_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(45, torch.float32).to(dtype)
    mask = torch.tensor([True, False, True, True, False] * 9)
    for value in (0.0, -float("inf"), float("nan"), 3, True, -1e-40):
        unboxed_equals_cpu(lambda t, m: t.clone().masked_fill_(m, value) if t.device.type == "cpu"
                           else t.masked_fill_(m, value), x, mask)
    expected = x.masked_fill(mask, -1.5)  # the functional form: clone, then masked_fill_
    assert_bitwise(x.to("mtia").masked_fill(mask.to("mtia"), -1.5).cpu(), expected)


def test_other_masked_fill_calls_keep_the_boxed_path_with_cpus_results_and_errors():
    x = torch.randn(6, 5)
    mask = x > 0
    for case in (lambda t, m: t.t().masked_fill(m.t(), 2.0),  # non-contiguous
                 lambda t, m: t.long().masked_fill(m, 7.5),  # integer self, a float value (CPU converts)
                 lambda t, m: t.masked_fill(m, torch.tensor(4.0, device=t.device))):  # a tensor value
        expected = case(x, mask)
        got = case(x.to("mtia"), mask.to("mtia")).cpu()
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    for bad in (lambda t, m: t.masked_fill_(m.to(torch.uint8), 1.0), lambda t, m: t.masked_fill_(m, 1j)):
        with pytest.raises(RuntimeError) as cpu_error:
            bad(x.clone(), mask)
        with pytest.raises(RuntimeError) as mtia_error:  # at the call, with CPU's message
            bad(x.to("mtia"), mask.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_sum_and_mean_over_dimensions_take_the_unboxed_path_with_cpus_bits(dtype):
    z = special_values(4 * 6 * 5, torch.float32).to(dtype).view(4, 6, 5)
    finite = torch.where(z.isfinite(), z, torch.zeros((), dtype=dtype)).clamp(-1000, 1000)
    for t in (z, finite):
        for dim in (0, 1, -1, (0, 2), [2, 0], (0, 1, 2), None, []):  # ([]: every dim, as CPU's rule)
            for keepdim in (False, True):
                unboxed_equals_cpu(lambda x: torch.sum(x, dim, keepdim=keepdim), t)
                unboxed_equals_cpu(lambda x: torch.mean(x, dim, keepdim=keepdim), t)
                unboxed_equals_cpu(lambda x: x.sum(dim, keepdim, dtype=dtype), t)
        unboxed_equals_cpu(lambda x: x.mean(), t)  # (mean.dim over [])


def test_other_sum_and_mean_calls_keep_the_boxed_path_with_cpus_results_and_errors():
    x = torch.randn(4, 6, 5)
    for case in (lambda t: t.sum(1, dtype=torch.float64), lambda t: t.transpose(0, 2).sum(0),
                 lambda t: t.long().sum(1), lambda t: t[0, 0, 0].sum(0)):
        expected = case(x)
        got = case(x.to("mtia")).cpu()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for bad, error in ((lambda t: t.sum(3), IndexError), (lambda t: t.sum((0, 0)), RuntimeError),
                       (lambda t: t.long().mean(0), RuntimeError), (lambda t: t.sum(-4), IndexError)):
        with pytest.raises(error) as cpu_error:
            bad(x)
        with pytest.raises(error) as mtia_error:  # at the call, with CPU's message
            bad(x.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


FLOAT_OPS = [n for n in UNARY if n not in ("abs", "neg", "relu", "floor", "ceil", "round", "trunc", "frac", "sign",
                                           "silu")]


@pytest.mark.parametrize("name", FLOAT_OPS)
def test_float_ops_of_integer_and_bool_tensors_take_the_unboxed_path_with_cpus_bits(name):
    # a result of the default dtype, as CPU's type promotion makes it
    fn = fn_of(name)
    for dtype in INTEGRAL + [torch.bool]:
        x = integers(37, dtype, 2) if dtype != torch.bool else torch.tensor([True, False, True] * 12 + [False])
        unboxed_equals_cpu(fn, x)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        unboxed_equals_cpu(fn, integers(9, torch.int32, 3))
    finally:
        torch.set_default_dtype(before)
    for bad in (lambda t: getattr(t, name + "_")(),):  # in place: a float result cannot go back to int
        with pytest.raises(RuntimeError) as cpu_error:
            bad(integers(5, torch.int64, 4))
        with pytest.raises(RuntimeError) as mtia_error:
            bad(integers(5, torch.int64, 4).to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_integer_calls_promoted_to_float_take_the_unboxed_path_with_cpus_bits(dtype):
    # true division, and a Python float: a result of the default dtype
    x, y = integers(50, dtype, 5), integers(50, dtype, 6)
    y[y == 0] = 3
    y[::7] = 0  # x / 0: inf, -inf and nan, as CPU's
    for fn in (lambda a, b: a / b, lambda a, b: torch.div(a, b), lambda a, b: torch.true_divide(a, b)):
        unboxed_equals_cpu(fn, x, y)
    for fn in (lambda t: t / 3, lambda t: t / 0, lambda t: t / 2.5, lambda t: t * 1.5, lambda t: t + 0.25,
               lambda t: t - 1e10, lambda t: torch.add(t, 2.5, alpha=2)):
        unboxed_equals_cpu(fn, x)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        unboxed_equals_cpu(lambda a, b: a / b, x, y)
        unboxed_equals_cpu(lambda t: t * 0.1, x)
    finally:
        torch.set_default_dtype(before)


def test_promoted_integer_calls_with_other_rules_keep_cpus_results_and_errors():
    x, y = integers(40, torch.int32, 7), integers(40, torch.int64, 8).abs() + 1
    for case in (lambda p, q: p / q,  # mixed dtypes: the boxed path
                 lambda p, q: torch.div(p, q, rounding_mode="floor"),  # integer result
                 lambda p, q: p / True,  # a bool number
                 lambda p, q: torch.add(p, 2.5, alpha=0.5)):  # a float alpha
        expected = case(x, y)
        got = case(x.to("mtia"), y.to("mtia")).cpu()
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    for bad in (lambda p: p.div_(2), lambda p: p.mul_(1.5)):
        with pytest.raises(RuntimeError) as cpu_error:
            bad(x.clone())
        with pytest.raises(RuntimeError) as mtia_error:  # at the call, with CPU's message
            bad(x.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)


@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_integer_tensors_with_integer_numbers_take_the_unboxed_path_with_cpus_bits(dtype):
    x = integers(50, dtype, 9)
    for fn in (lambda t: t.clamp(-3, 40), lambda t: t.clamp(min=2), lambda t: t.clamp(max=-1),
               lambda t: torch.clamp_min(t, 5), lambda t: torch.clamp_max(t, 5), lambda t: torch.fmod(t, 7),
               lambda t: torch.remainder(t, -7), lambda t: t % 3, lambda t: t ** 3, lambda t: t ** 0,
               lambda t: torch.pow(t, 2)):
        unboxed_equals_cpu(fn, x)


def test_integer_tensors_with_numbers_whose_values_raise_keep_cpus_errors_and_results():
    x = integers(30, torch.int32, 10)
    for bad, error in ((lambda t: t % 0, RuntimeError), (lambda t: torch.fmod(t, 0), RuntimeError),
                       (lambda t: t ** -1, RuntimeError)):
        with pytest.raises(error) as cpu_error:
            bad(x)
        with pytest.raises(error) as mtia_error:  # at the call, with CPU's message
            bad(x.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)
    for case in (lambda t: t.clamp(0.5, 3.5), lambda t: t.clamp(min=1.5), lambda t: t ** 0.5,
                 lambda t: torch.fmod(t, 2.5)):  # float numbers: promoted results, the boxed path
        expected = case(x)
        got = case(x.to("mtia")).cpu()
        assert got.dtype == expected.dtype and torch.equal(got.isnan(), expected.isnan())
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", FLOATING + INTEGRAL + [torch.bool], ids=str)
def test_any_and_all_take_the_unboxed_path_with_cpus_results(dtype):
    # a 0-dim bool (uint8 for uint8, as CPU's); NaN counts as true
    for values in ([0, 0, 0], [0, 1, 0], [1, 1, 1], [0] * 99 + [1]):
        x = torch.tensor(values).to(dtype)
        unboxed_equals_cpu(torch.any, x)
        unboxed_equals_cpu(torch.all, x)
    if dtype.is_floating_point:
        unboxed_equals_cpu(torch.any, torch.tensor([0.0, float("nan")], dtype=dtype))
        unboxed_equals_cpu(torch.all, torch.tensor([-0.0, 1.0], dtype=dtype))
    x = torch.ones(40000, dtype=dtype)  # over GRAIN_SIZE: the boxed path, CPU's result
    assert torch.equal(torch.all(x.to("mtia")).cpu(), torch.all(x))



@pytest.mark.parametrize("dtype", FLOATING + [torch.int64, torch.bool], ids=str)
def test_where_and_masked_fill_that_broadcast_take_the_unboxed_path_with_cpus_bits(dtype):
    g = torch.Generator().manual_seed(11)
    x, y = (torch.randn(3, 5, 7, generator=g) * 10).to(dtype), (torch.randn(3, 5, 7, generator=g) * 10).to(dtype)
    c = torch.randn(3, 5, 7, generator=g) > 0
    # (each operand made contiguous on CPU: a view taken on mtia is a call of its own)
    for cond, a, b in ((c, x, y[0]), (c[:, :1], x, y), (c[0, 0], x[:, :1], y[:1, :, :1]),  # every operand broadcast
                       (c, x, y[0, 0, 0])):  # a 0-dim other
        unboxed_equals_cpu(torch.where, cond.contiguous(), a.contiguous(), b.contiguous())
    if dtype.is_floating_point:
        unboxed_equals_cpu(lambda m, t: torch.where(m, t, 0.0), c, x)  # a Python number: a 0-dim device tensor
    if not dtype.is_floating_point:
        return  # (masked_fill_ of an integer or bool self: the boxed path)
    for mask in (c[0], c[:, :1], c[:, :, :1], c[0, 0, :1]):
        unboxed_equals_cpu(lambda t, m: t.clone().masked_fill_(m, -2.5) if t.device.type == "cpu"
                           else t.masked_fill_(m, -2.5), x, mask.contiguous())


def test_where_and_masked_fill_that_do_not_broadcast_raise_cpus_errors_at_the_call():
    x, c = torch.randn(4, 6), torch.randn(4, 6) > 0
    for bad in (lambda t, m: torch.where(m, t, t[:, :5]), lambda t, m: t.masked_fill_(m[:, :5], 1.0),
                lambda t, m: t[:1].masked_fill_(m, 1.0)):  # a mask larger than self
        with pytest.raises(RuntimeError) as cpu_error:
            bad(x.clone(), c)
        with pytest.raises(RuntimeError) as mtia_error:
            bad(x.to("mtia"), c.to("mtia"))
        assert str(cpu_error.value).split("\n")[0] in str(mtia_error.value)
    torch.mtia.synchronize()


@pytest.mark.parametrize("dtype", INTEGRAL + [torch.bool], ids=str)
def test_masked_fill_of_integer_and_bool_self_takes_the_unboxed_path_with_cpus_bits(dtype):
    x = integers(45, dtype, 0) if dtype != torch.bool else torch.arange(45) % 3 == 0
    mask = torch.tensor([True, False, True, True, False] * 9)
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    values = (True, False) if dtype == torch.bool else (0, -1 if info.min < 0 else 1, info.min, info.max)
    for value in values:
        unboxed_equals_cpu(lambda t, m: t.clone().masked_fill_(m, value) if t.device.type == "cpu"
                           else t.masked_fill_(m, value), x, mask)
    unboxed_equals_cpu(lambda t, m: t.clone().masked_fill_(m, values[1]) if t.device.type == "cpu"
                       else t.masked_fill_(m, values[1]), x.view(5, 9), mask[:9])  # a mask that broadcasts
    if dtype not in (torch.bool, torch.int64):  # out of the dtype's range: CPU's error, at the call
        with pytest.raises(RuntimeError, match="value cannot be converted to type .* without overflow"):
            x.to("mtia").masked_fill_(mask.to("mtia"), info.max + 1)


@pytest.mark.parametrize("dtype", FLOATING + INTEGRAL, ids=str)
def test_a_number_minus_a_tensor_takes_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(45, torch.float32).to(dtype) if dtype.is_floating_point else integers(45, dtype, 0)
    for number in (7, -3, 0.5, 2.25) if dtype.is_floating_point or dtype == torch.int64 else (7, 0.5):
        unboxed_equals_cpu(lambda t: number - t, x)  # rsub: a float number makes an integer tensor's a float
        unboxed_equals_cpu(lambda t: torch.rsub(t, number, alpha=2), x)


def test_a_number_minus_a_bool_tensor_raises_cpus_error_at_the_call():
    b = torch.tensor([True, False] * 5)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
        1 - b.to("mtia")
    with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must not be a floating"):
        torch.rsub(torch.arange(4, device="mtia"), 1, alpha=0.5)
    assert torch.equal((1.5 - b.float().to("mtia")).cpu(), 1.5 - b.float())  # the device stays usable


@pytest.mark.parametrize("dtype", FLOATING + INTEGRAL, ids=str)
def test_floor_division_takes_the_unboxed_path_with_cpus_bits(dtype):
    if dtype.is_floating_point:
        x, y = special_values(45, torch.float32).to(dtype), special_values(45, torch.float32).flip(0).to(dtype)
        numbers = (3, -2, 0.75, -1.5)
    else:
        x, y = integers(45, dtype, 0), integers(45, dtype, 1)
        y[y == 0] = 3
        numbers = (3, -2) if dtype != torch.uint8 else (3, 7)
    unboxed_equals_cpu(lambda a, b: a // b, x, y)
    for number in numbers:
        unboxed_equals_cpu(lambda a: a // number, x)


def test_floor_division_by_zero_raises_as_on_cpu():
    x = torch.arange(-5, 5)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # a zero number: at the call
        x.to("mtia") // 0
    y = torch.tensor([1, 2, 0, 3, 1, 2, 1, 1, 1, 1])
    z = x.to("mtia") // y.to("mtia")  # a zero element: device data, at the next synchronize
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.mtia.synchronize()
    del z
    assert torch.equal((x.to("mtia") // 2).cpu(), x // 2)  # the device stays usable


MIXED = [(torch.float32, torch.bool), (torch.bool, torch.float32), (torch.int32, torch.int64), (torch.float32, torch.float64),
         (torch.bfloat16, torch.float32), (torch.float16, torch.bfloat16), (torch.uint8, torch.int8), (torch.int64, torch.float16),
         (torch.bool, torch.int16)]


def mixed_operand(dtype, seed):
    if dtype == torch.bool:
        return torch.arange(45) % (2 + seed) == 0
    return special_values(45, torch.float32).to(dtype) if dtype.is_floating_point else integers(45, dtype, seed)


@pytest.mark.parametrize("dtypes", MIXED, ids=str)
def test_binary_ops_of_mixed_dtypes_take_the_unboxed_path_with_cpus_bits(dtypes):
    x, y = mixed_operand(dtypes[0], 0), mixed_operand(dtypes[1], 1)
    y = torch.where(y == 0, torch.ones((), dtype=y.dtype), y) if y.dtype != torch.bool else y
    for fn in (torch.add, torch.mul, torch.div, lambda a, b: torch.add(a, b, alpha=2)):
        unboxed_equals_cpu(fn, x, y)
    if torch.bool not in dtypes:
        unboxed_equals_cpu(torch.sub, x, y)
    if torch.can_cast(torch.result_type(x, y), x.dtype):  # in place: where self's dtype holds the result
        unboxed_equals_cpu(lambda a, b: a.clone().mul_(b) if a.device.type == "cpu" else a.mul_(b), x, y)


def test_mixed_dtypes_that_raise_on_cpu_raise_at_the_call():
    i, f, b = torch.arange(6), torch.ones(6), torch.ones(6, dtype=torch.bool)
    cases = [(lambda a, c: a.add_(c), i, f, "result type Float can't be cast to the desired output type Long"),
             (lambda a, c: a - c, f, b, "Subtraction, the `-` operator, with a bool tensor is not supported"),
             (lambda a, c: a.div_(c), i, i.int(), "result type Float can't be cast to the desired output type Long")]
    for fn, a, c, message in cases:
        with pytest.raises(RuntimeError, match=message):
            fn(a.to("mtia"), c.to("mtia"))
    assert torch.equal((i.to("mtia") * f.to("mtia")).cpu(), i * f)  # the device stays usable


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_small_softmax_scans_and_arg_reductions_take_the_unboxed_path_with_cpus_bits(dtype):
    z = special_values(4 * 6 * 5, torch.float32).to(dtype).view(4, 6, 5)
    finite = torch.where(z.isfinite(), z, torch.zeros((), dtype=dtype)).clamp(-5, 5)
    A = torch.ops.aten
    for t in (z, finite):
        for dim in (0, 1, -1):
            unboxed_equals_cpu(lambda a: torch.softmax(a, dim), t, close=True)
            unboxed_equals_cpu(lambda a: torch.log_softmax(a, dim), t, close=True)
            y = torch.softmax(finite, dim)
            unboxed_equals_cpu(lambda g, out: A._softmax_backward_data(g, out, dim, dtype), t, y, close=True)
            unboxed_equals_cpu(lambda g, out: A._log_softmax_backward_data(g, out, dim, dtype), t, y.log(),
                               close=True)
            unboxed_equals_cpu(lambda a: torch.cumsum(a, dim), t)
            unboxed_equals_cpu(lambda a: torch.cumprod(a, dim), t)
            for keepdim in (False, True):
                unboxed_equals_cpu(lambda a: torch.argmax(a, dim, keepdim), t)
                unboxed_equals_cpu(lambda a: torch.argmin(a, dim, keepdim), t)
        unboxed_equals_cpu(lambda a: torch.argmax(a), t)
        unboxed_equals_cpu(lambda a: torch.argmin(a, keepdim=True), t)
        unboxed_equals_cpu(lambda a: a.max(), t)
        unboxed_equals_cpu(lambda a: a.min(), t)
    unboxed_equals_cpu(lambda a: torch.softmax(a, 0), torch.tensor(2.5, dtype=dtype))  # a 0-dim tensor


@pytest.mark.parametrize("dtype", INTEGRAL + [torch.bool], ids=str)
def test_small_scans_and_extrema_of_integer_and_bool_tensors_take_the_unboxed_path(dtype):
    x = integers(60, dtype, 0).view(6, 10) if dtype != torch.bool else (torch.arange(60) % 3 == 0).view(6, 10)
    for dim in (0, 1):
        unboxed_equals_cpu(lambda a: torch.cumsum(a, dim), x)  # an int64 result, as CPU's promotion
        unboxed_equals_cpu(lambda a: torch.cumsum(a, dim, dtype=torch.int64), x)
        if dtype != torch.bool:
            unboxed_equals_cpu(lambda a: torch.argmax(a, dim), x)
    unboxed_equals_cpu(lambda a: a.max(), x)
    unboxed_equals_cpu(lambda a: a.min(), x)


@pytest.mark.parametrize("dtype", FLOATING + [torch.int64, torch.bool], ids=str)
def test_small_index_select_takes_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(60, torch.float32).to(dtype).view(6, 10) if dtype.is_floating_point else (
        torch.arange(60).view(6, 10) % 7 == 0 if dtype == torch.bool else integers(60, dtype, 0).view(6, 10))
    for index_dtype in (torch.int64, torch.int32):
        for dim, index in ((0, [5, 0, 0, 3]), (1, [9, 1]), (-1, [2]), (0, 4)):
            unboxed_equals_cpu(lambda a, i: a.index_select(dim, i), x, torch.tensor(index, dtype=index_dtype))


def test_small_ops_keep_cpus_errors():
    x = torch.randn(4, 5)
    cases = [(lambda t: torch.softmax(t, 2), IndexError, "Dimension out of range"),
             (lambda t: torch.cumsum(t, -3), IndexError, "Dimension out of range"),
             (lambda t: torch.argmax(t, 5), IndexError, "Dimension out of range"),
             (lambda t: t[:0].max(), RuntimeError, "max\\(\\): Expected reduction dim to be specified for input.numel\\(\\) == 0"),
             (lambda t: t.index_select(0, torch.tensor([0.0], device=t.device)), RuntimeError, "index_select\\(\\): Expected dtype int32 or int64 for index"),
             (lambda t: (t > 0).argmax(), RuntimeError, "argmax\\(\\): does not support bool input")]
    for fn, error, message in cases:
        with pytest.raises(error, match=message):
            fn(x)
        with pytest.raises(error, match=message):  # at the call, as on CPU
            fn(x.to("mtia"))
    y = x.to("mtia").index_select(0, torch.tensor([7], device="mtia"))  # the device's data: at the next synchronize
    with pytest.raises(RuntimeError, match="index out of range in self"):
        torch.mtia.synchronize()
    del y
    assert torch.equal(x.to("mtia").index_select(1, torch.tensor([4, 0], device="mtia")).cpu(),
                       x.index_select(1, torch.tensor([4, 0])))  # the device stays usable


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_small_gelu_and_its_backward_take_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(77, torch.float32).to(dtype)
    g = special_values(77, torch.float32).flip(0).to(dtype)
    for approximate in ("none", "tanh"):
        unboxed_equals_cpu(lambda t: torch.nn.functional.gelu(t, approximate=approximate), x)
        unboxed_equals_cpu(lambda a, b: torch.ops.aten.gelu_backward(a, b, approximate=approximate), g, x)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        torch.nn.functional.gelu(x.to("mtia"), approximate="fast")  # at the call, as on CPU


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_ternary_ops_of_alike_tensors_take_the_unboxed_path_with_cpus_bits(dtype):
    x = special_values(77, torch.float32).to(dtype)
    y = special_values(77, torch.float32).flip(0).to(dtype)
    w = torch.linspace(-0.5, 1.5, 77).to(dtype)
    unboxed_equals_cpu(lambda a, lo, hi: torch.clamp(a, lo, hi), x, y, w)
    unboxed_equals_cpu(lambda a, lo: torch.clamp(a, min=lo), x, y)
    unboxed_equals_cpu(lambda a, hi: torch.clamp(a, max=hi), x, w)
    unboxed_equals_cpu(torch.lerp, x, y, w)
    for value in (1, 0.5, -3):
        unboxed_equals_cpu(lambda a, b, c: torch.addcmul(a, b, c, value=value), x, y, w)
        unboxed_equals_cpu(lambda a, b, c: torch.addcdiv(a, b, c, value=value), x, y, w)


def test_other_ternary_calls_keep_the_boxed_path_and_cpus_errors():
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    for fn in (lambda a, b: torch.clamp(a, b[0], None), lambda a, b: torch.lerp(a, b, b.double()),
               lambda a, b: torch.addcmul(a, b, b[:, :1])):  # broadcasting, mixed dtypes
        try:
            expected = fn(x, y)
        except RuntimeError as cpu_error:
            with pytest.raises(RuntimeError) as mtia_error:
                fn(x.to("mtia"), y.to("mtia"))
            assert str(cpu_error).split("\n")[0] in str(mtia_error.value)
            continue
        assert torch.equal(fn(x.to("mtia"), y.to("mtia")).cpu(), expected)
    with pytest.raises(RuntimeError, match="torch.clamp: At least one of 'min' or 'max' must not be None"):
        torch.clamp(x.to("mtia"), None, None)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_small_var_std_prod_norm_and_max_dim_take_the_unboxed_path_with_cpus_bits(dtype):
    z = special_values(4 * 6 * 5, torch.float32).to(dtype).view(4, 6, 5)
    finite = torch.where(z.isfinite(), z, torch.zeros((), dtype=dtype)).clamp(-2, 2)
    for t in (z, finite):
        for dim in (None, 0, -1, (0, 2)):
            for keepdim in (False, True):
                unboxed_equals_cpu(lambda a: torch.var(a, dim, keepdim=keepdim), t, close=True)
                unboxed_equals_cpu(lambda a: torch.std(a, dim, correction=0, keepdim=keepdim), t, close=True)
                unboxed_equals_cpu(lambda a: torch.linalg.vector_norm(a, 2, dim, keepdim), t, close=True)
                unboxed_equals_cpu(lambda a: torch.linalg.vector_norm(a, float("inf"), dim, keepdim), t)
        unboxed_equals_cpu(lambda a: a.prod(), t)
        for dim in (0, 1, -1):
            unboxed_equals_cpu(lambda a: a.prod(dim), t)
            unboxed_equals_cpu(lambda a: a.prod(dim, keepdim=True), t)
            for fn in (torch.max, torch.min):
                unboxed_equals_cpu(lambda a: fn(a, dim)[0], t)
                unboxed_equals_cpu(lambda a: fn(a, dim, keepdim=True)[1], t)


def test_small_reductions_keep_cpus_errors():
    x = torch.randn(4, 5)
    cases = [(lambda t: t.var(3), IndexError, "Dimension out of range"),
             (lambda t: t.std((0, 0)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
             (lambda t: t.prod(2), IndexError, "Dimension out of range"),
             (lambda t: t.max(-3), IndexError, "Dimension out of range"),
             (lambda t: t[:, :0].max(1), IndexError, "max\\(\\): Expected reduction dim 1 to have non-zero size"),
             (lambda t: t.long().var(), RuntimeError, "std and var only support floating point and complex dtypes")]
    for fn, error, message in cases:
        with pytest.raises(error, match=message):
            fn(x)
        with pytest.raises(error, match=message):  # at the call, as on CPU
            fn(x.to("mtia"))
    torch.testing.assert_close(x.to("mtia").var(0).cpu(), x.var(0))  # the device stays usable
    for fn in (lambda t: t[:1, :1].var(), lambda t: t.var(1, correction=5), lambda t: t[:, :1].std(1)):
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):  # at the call, as on CPU
            got = fn(x.to("mtia"))
        torch.testing.assert_close(got.cpu(), fn(x), equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATING + [torch.int64, torch.bool], ids=str)
def test_small_cat_takes_the_unboxed_path_with_cpus_bits(dtype):
    def sample(*shape, seed):
        n = 1
        for k in shape:
            n *= k
        if dtype == torch.bool:
            return (torch.arange(n) % (2 + seed) == 0).view(shape)
        if dtype == torch.int64:
            return integers(n, dtype, seed).view(shape)
        return special_values(n, torch.float32).roll(seed).to(dtype).view(shape)
    a, b, c = sample(3, 4, seed=0), sample(2, 4, seed=1), sample(3, 5, seed=2)
    unboxed_equals_cpu(lambda x, y: torch.cat([x, y]), a, b)
    unboxed_equals_cpu(lambda x, y: torch.cat([x, y, x], 0), a, b)
    unboxed_equals_cpu(lambda x, z: torch.cat([x, z], dim=-1), a, c)
    unboxed_equals_cpu(lambda x: torch.cat([x]), a)


def test_other_cat_calls_keep_the_boxed_path_and_cpus_errors():
    a, b = torch.randn(3, 4), torch.randn(2, 5)
    for fn in (lambda x, y: torch.cat([x, y.double()[:, :4]]), lambda x, y: torch.cat([x.t(), y[:, :4].t()], 1),
               lambda x, y: torch.cat([x, torch.empty(0, device=x.device)])):  # mixed dtypes, non-contiguous, legacy empty
        assert torch.equal(fn(a.to("mtia"), b.to("mtia")).cpu(), fn(a, b))
    for fn, message in ((lambda x, y: torch.cat([x, y]), "Sizes of tensors must match except in dimension 0"),
                        (lambda x, y: torch.cat([x, y], 2), "Dimension out of range")):
        with pytest.raises((RuntimeError, IndexError), match=message):
            fn(a, b)
        with pytest.raises((RuntimeError, IndexError), match=message):  # at the call
            fn(a.to("mtia"), b.to("mtia"))
