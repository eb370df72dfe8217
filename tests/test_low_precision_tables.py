"""bf16/fp16 functions of one tensor through tables of CPU's results
(csrc/aten/low_precision/tables.h): where the path is float32 (not mode native),
a call over a plain tensor of at least 32,768 elements looks each element up
in a table that CPU's own kernel of the dtype made over all 65,536 bit
patterns. Against CPU's kernel on the same tensor: bit for bit (inf, signed
zeros, subnormals included; NaN for NaN), the first call of a signature and later
ones; CPU's kernel itself where the path does not take the call."""
import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
A = torch.ops.aten

mode = low_precision_setting.float32_or_native

OPS = {
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log2": torch.log2, "log10": torch.log10,
    "log1p": torch.log1p, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin,
    "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "tanh": torch.tanh, "erf": torch.erf, "erfc": torch.erfc,
    "erfinv": torch.erfinv, "sinc": torch.sinc, "lgamma": torch.lgamma,
    "digamma": torch.digamma, "i0": torch.i0, "mish": F.mish,
    "i0e": torch.special.i0e, "i1": torch.special.i1, "i1e": torch.special.i1e,
    "elu": F.elu, "elu alpha": lambda x: F.elu(x, 0.3), "selu": F.selu, "celu": lambda x: F.celu(x, 0.5),
    "softplus": F.softplus, "softplus beta": lambda x: F.softplus(x, 2.0, 5.0), "logsigmoid": F.logsigmoid,
    "log_sigmoid_forward": lambda x: A.log_sigmoid_forward(x), "logit": torch.logit,
    "logit eps": lambda x: torch.logit(x, 1e-3), "pow": lambda x: x.pow(1.5), "pow negative": lambda x: x.pow(-2.25),
    "fmod": lambda x: x.fmod(0.7), "fmod int": lambda x: torch.fmod(x, 2), "remainder": lambda x: x % 0.7,
}
# CPU's scalar loop (the end of each thread's range) gives another bit than
# its vector loop for some values of these; the table gives the vector
# loop's: within the dtype's tolerance of CPU's.
VECTOR_ONLY = {"i0e"}


def special(n, dtype, seed=0):
    """n values of `dtype`: random ones over a wide range, then NaN, +-inf,
    +-0, subnormals, the largest, and values near 0 and 1."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=g) * 4).to(dtype)
    info = torch.finfo(dtype)
    edge = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, info.tiny / 4, -info.tiny / 4,
                         info.max, -info.max, 1.0, -1.0, 0.999, 1e-3, 0.5, 2.0, 20.0, -20.0])
    x[: edge.numel()] = edge.to(dtype)
    return x


def results(r):
    return list(r) if isinstance(r, tuple) else [r]


def assert_cpus(got, want, exact):
    for g, w in zip(results(got), results(want)):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        if exact and w.element_size() != 2:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        elif exact:  # the same bits, NaN for NaN (CPU's vector loop and scalar tail make different NaNs)
            nan = w.isnan()
            assert torch.equal(g.isnan(), nan)
            g, w = g.contiguous().view(torch.int16), w.contiguous().view(torch.int16)
            assert torch.equal(g[~nan], w[~nan]), (g, w)
        else:
            torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_tables_give_cpus_bits(op, dtype, mode):
    f = OPS[op]
    for seed, n in ((0, 40_001), (1, 65_536 + 7)):  # (a signature's first call, then a later one; odd tails)
        x = special(n, dtype, seed)
        d = x.to("mtia")
        torch.mtia.synchronize()
        before = C._low_precision_table_calls()
        got = f(d)
        torch.mtia.synchronize()
        # (exp2 keeps CPU's kernel on a host whose loops run 16 lanes: cheaper than a lookup there)
        table = mode == "float32" and not (op == "exp2" and C._activation_isa() == "avx512")
        assert C._low_precision_table_calls() - before == (1 if table else 0)
        assert_cpus(got, f(x), exact=op not in VECTOR_ONLY or mode == "native")


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_in_place_and_out_overloads(dtype, mode):
    x = special(48_000, dtype).view(240, 200)
    table = 1 if mode == "float32" else 0
    for f, f_ in ((torch.expm1, torch.Tensor.expm1_), (lambda x: F.elu(x, 0.5), lambda x: F.elu_(x, 0.5)),
                  (lambda x: x.fmod(1.5), lambda x: x.fmod_(1.5))):
        d = x.to("mtia")
        torch.mtia.synchronize()
        before = C._low_precision_table_calls()
        r = f_(d)
        assert r is d
        torch.mtia.synchronize()  # (the count moves when the task runs)
        assert C._low_precision_table_calls() - before == table
        assert_cpus(d, f_(x.clone()), exact=True)
        d = x.to("mtia")
        assert_cpus(f_(d.t()), f_(x.clone().t()), exact=True)  # (a transposed self: CPU's kernel)
    # out= of x's sizes and strides: the table; another out=: CPU's kernel (it resizes)
    out, d = torch.empty(240, 200, dtype=dtype, device="mtia"), x.to("mtia")
    torch.mtia.synchronize()
    before = C._low_precision_table_calls()
    r = torch.sinh(d, out=out)
    torch.mtia.synchronize()
    assert r is out and C._low_precision_table_calls() - before == table
    assert_cpus(out, torch.sinh(x), exact=True)
    out, d = torch.empty(0, dtype=dtype, device="mtia"), x.to("mtia")
    torch.mtia.synchronize()
    before = C._low_precision_table_calls()
    torch.sinh(d, out=out)
    torch.mtia.synchronize()
    assert C._low_precision_table_calls() == before
    assert_cpus(out, torch.sinh(x), exact=True)
    # out= of another dtype: CPU's kernel, and its error at the call
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Int"):
        torch.sinh(x.to("mtia"), out=torch.empty(240, 200, dtype=torch.int32, device="mtia"))
    # log_sigmoid_forward's two outputs
    o, b, d = torch.empty_like(x, device="mtia"), torch.empty_like(x, device="mtia"), x.to("mtia")
    torch.mtia.synchronize()
    before = C._low_precision_table_calls()
    A.log_sigmoid_forward.output(d, output=o, buffer=b)
    torch.mtia.synchronize()
    assert C._low_precision_table_calls() - before == table
    assert_cpus((o, b), A.log_sigmoid_forward(x), exact=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_table_path_leaves_to_cpu(dtype, mode):
    x = special(48_000, dtype).view(240, 200)
    cases = [
        lambda x: torch.expm1(x.t()),                  # a fresh result of a transposed self
        lambda x: torch.expm1(x[:, ::2]),              # not dense
        lambda x: torch.expm1(x[:100]),                # fewer than 32,768 elements
        # (a neg bit is resolved before the kernel, as on CPU: the plain
        # tensor then takes the table, with CPU's values)
        lambda x: torch.fmod(x, x[0, 0].clone()),      # a 0-dim tensor of the device, not a number
        lambda x: torch.fmod(x, torch.ones_like(x)),   # two tensors
        lambda x: x.float().expm1(),                   # float32
        lambda x: x.pow(-0.5),                         # pow's exponents CPU computes otherwise
        lambda x: x.pow(3),
        lambda x: x.pow(2.0),
    ]
    for f in cases:
        d = x.to("mtia")
        torch.mtia.synchronize()
        before = C._low_precision_table_calls()
        got = f(d)
        torch.mtia.synchronize()  # (the count moves when the task runs)
        assert C._low_precision_table_calls() == before
        assert_cpus(got, f(x), exact=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.fmod(x.to("mtia"), torch.ones_like(x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_table_per_op_dtype_and_numbers(dtype):
    for _ in low_precision_setting.setting("float32"):
        x = special(40_000, dtype, seed=3)
        d = x.to("mtia")
        made = C._low_precision_tables_made()
        for alpha in (0.37, 0.41, 0.37, 0.41):  # (numbers no other test uses) two tables, each made once
            assert_cpus(F.elu(d, alpha), F.elu(x, alpha), exact=True)
        assert_cpus(F.elu_(d.clone(), 0.41), F.elu_(x.clone(), 0.41), exact=True)  # (in place: the same table)
        torch.mtia.synchronize()
        assert C._low_precision_tables_made() - made == 2
        # more tables than are kept (128): the oldest are dropped, and made
        # again when called again; the results stay CPU's
        divisors = [0.25 + 0.001 * i for i in range(130)]
        for k in divisors + divisors[:3]:
            assert_cpus(torch.fmod(d, k), torch.fmod(x, k), exact=True)
        torch.mtia.synchronize()
        assert C._low_precision_tables_made() - made == 2 + 130 + 3
