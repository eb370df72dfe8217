"""bf16/fp16 reductions of all elements and over the last dims
(csrc/aten/low_precision/reductions.h): sum, mean, amax and amin through the vector loops (AVX2 and, on hosts with
it, AVX-512) and through CPU's kernels (OPENMTIA_LOW_PRECISION=native, or no
ISA), against CPU PyTorch in the same dtype."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]
GRAIN = 32768
# around the 16-lane vectors and the 64-vector blocks, and one size whose
# ranges run on every thread
SIZES = [GRAIN + k for k in (1, 7, 15, 16, 17, 31, 33, 1023, 1025)] + [C._parallel_work() + 12345]

OPS = {
    "sum": lambda x: x.sum(),
    "sum_dim_empty": lambda x: x.sum(dim=[]),
    "sum_all_dims_keepdim": lambda x: x.view(-1, 1).sum(dim=(0, 1), keepdim=True),
    "mean": lambda x: x.mean(),
    "mean_all_dims_keepdim": lambda x: x.view(1, -1).mean(dim=(-1, 0), keepdim=True),
    "amax": lambda x: x.amax(),
    "amin": lambda x: x.amin(),
    "amax_keepdim": lambda x: torch.amax(x.view(-1, 1), dim=(), keepdim=True),
    "amin_all_dims": lambda x: torch.amin(x.view(1, -1), dim=(0, 1)),
}
EXACT = ("amax", "amin")  # the result is one of the elements


mode = low_precision_setting.fused_or_cpu  # (the fixture: "fused" or "cpu" in each setting)


def run(mode, f, *args, fused=True):
    """f on mtia, checking which kernel took it, against f on CPU."""
    n = C._fused_reduction_calls()
    got = f(*(t.to("mtia") for t in args))
    torch.mtia.synchronize()
    took = C._fused_reduction_calls() - n
    assert took == (1 if mode == "fused" and fused else 0), took
    want = f(*args)
    assert got.device.type == "mtia" and got.dtype == want.dtype and got.shape == want.shape
    return got.cpu(), want


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_reductions_match_cpu(op, n, dtype, mode):
    torch.manual_seed(n)
    x = (torch.randn(n) * 4).to(dtype)
    for _ in range(2):  # first and later calls of the signature
        got, want = run(mode, OPS[op], x)
        if any(op.startswith(e) for e in EXACT):
            assert torch.equal(got, want), (got, want)
        else:
            torch.testing.assert_close(got, want)
            # and at least as close to the exact value as CPU's, give or take one rounding
            exact = OPS[op](x.double())
            ulp = torch.finfo(dtype).eps * max(1.0, abs(exact.item()))
            assert abs(got.double().item() - exact.item()) <= abs(want.double().item() - exact.item()) + ulp


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_specials_as_on_cpu(dtype, mode):
    n = GRAIN + 100
    cases = {
        "nan": {5: float("nan")},
        "nan_last": {n - 1: float("nan")},
        "inf": {7: float("inf")},
        "both_infs": {7: float("inf"), n - 3: float("-inf")},
        "max_values": {i: torch.finfo(dtype).max for i in range(0, n, 997)},  # the sum overflows to inf
    }
    for name, values in cases.items():
        x = torch.rand(n).to(dtype)
        for i, v in values.items():
            x[i] = v
        for op in ("sum", "mean", "amax", "amin"):
            got, want = run(mode, OPS[op], x)
            assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf()), (name, op)
            torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mean_of_large_values_is_computed_in_float32(dtype, mode):
    # fp16: the sum (4e7) overflows the dtype, the mean (1000) does not, on CPU as here
    x = torch.full((GRAIN * 2,), 1000.0).to(dtype)
    got, want = run(mode, OPS["mean"], x)
    assert torch.equal(got, want) and want.item() == 1000.0
    got, want = run(mode, OPS["sum"], x)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    torch.manual_seed(1)
    x = torch.randn(300, 200).to(dtype)
    calls = {
        "small": lambda: (x[:10].to("mtia").sum(), x[:10].sum()),  # the small-op path: CPU's bits
        "transposed": lambda: (x.t().to("mtia").sum(), x.t().sum()),
        "strided": lambda: (x.to("mtia")[:, ::2].amax(), x[:, ::2].amax()),
        "float32_sum": lambda: (x.to("mtia").sum(dtype=torch.float32), x.sum(dtype=torch.float32)),
        # (the leading dims: test_reductions_over_leading_dims_match_cpu)
        "not_the_last_dims": lambda: (x.view(30, 10, 200).to("mtia").sum(dim=(0, 2)), x.view(30, 10, 200).sum(dim=(0, 2))),
        "rows_transposed": lambda: (x.t().to("mtia").amax(dim=1), x.t().amax(dim=1)),
    }
    for name, f in calls.items():
        n = C._fused_reduction_calls()
        got, want = f()
        torch.mtia.synchronize()
        assert C._fused_reduction_calls() == n, name
        assert got.dtype == want.dtype and got.shape == want.shape, name
        torch.testing.assert_close(got.cpu(), want, msg=name)
    assert torch.equal(x[:10].to("mtia").sum().cpu(), x[:10].sum())


def assert_no_less_accurate(f, x, got, want):
    """Each finite result at least as close to f in float64 as CPU's, give or
    take one rounding of the dtype."""
    exact = f(x.double())
    ulp = torch.finfo(x.dtype).eps * exact.abs().clamp(min=1)
    finite = exact.isfinite()
    err, cpu_err = (got.double() - exact).abs(), (want.double() - exact).abs()
    assert bool((err <= cpu_err + ulp)[finite].all())


ROW_OPS = {
    "sum": lambda x: x.sum(dim=-1),
    "mean": lambda x: x.mean(dim=-1),
    "amax": lambda x: x.amax(dim=-1),
    "amin": lambda x: x.amin(dim=-1),
    "sum_keepdim": lambda x: x.sum(dim=-1, keepdim=True),
    "amax_keepdim": lambda x: x.amax(dim=-1, keepdim=True),
    "mean_last_two": lambda x: x.view(x.shape[0], 1, -1).mean(dim=(2, 1)),
    "amin_last_two_keepdim": lambda x: x.view(x.shape[0], 1, -1).amin(dim=(-1, -2), keepdim=True),
    "sum_last_dim_positive": lambda x: x.view(1, *x.shape).sum(dim=2),
}
# (rows, cols), each over GRAIN elements: columns around the vectors and
# blocks, rows of one element, rows over the parallel threshold
ROW_SHAPES = [(GRAIN + 1, 1), (GRAIN // 7 + 1, 7), (2521, 13), (GRAIN // 16 + 1, 16), (1929, 17), (33, 1025),
              (33, 1024), (C._parallel_work() // 1000 + 3, 1000)]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_row_reductions_match_cpu(op, shape, dtype, mode):
    torch.manual_seed(shape[1])
    x = (torch.randn(*shape) * 4).to(dtype)
    x[1, 0] = float("nan")  # a NaN row, an infinite one, one of both infinities
    x[2, -1] = float("inf")
    x[3, 0], x[3, -1] = float("inf"), float("-inf")
    reduction_matches_cpu(mode, op, ROW_OPS[op], x)


def reduction_matches_cpu(mode, op, f, x):
    """f over x on mtia, the first and a later call of the signature:
    extrema CPU's exactly, sums within CPU's tolerance and as accurate."""
    for _ in range(2):
        got, want = run(mode, f, x)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        if op.startswith(("amax", "amin")):
            torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        else:
            torch.testing.assert_close(got, want, equal_nan=True)
            assert_no_less_accurate(f, x, got, want)


NORMS = {
    "vector_norm": lambda x: torch.linalg.vector_norm(x),
    "vector_norm_ord_2": lambda x: torch.linalg.vector_norm(x, 2.0, dim=None),
    "vector_norm_rows": lambda x: torch.linalg.vector_norm(x, dim=-1),
    "vector_norm_last_two_keepdim": lambda x: torch.linalg.vector_norm(x.view(x.shape[0], 1, -1), dim=(-1, -2),
                                                                       keepdim=True),
    "tensor_norm": lambda x: x.norm(),
    "norm_rows": lambda x: torch.norm(x, p=2, dim=1),
    "norm_empty_dim": lambda x: torch.norm(x, dim=[]),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", [(GRAIN + 1,), (2521, 13), (33, 1025), (C._parallel_work() // 1000 + 3, 1000)],
                         ids=str)
@pytest.mark.parametrize("op", sorted(NORMS))
def test_norms_match_cpu(op, shape, dtype, mode):
    torch.manual_seed(len(shape) + shape[-1])
    x = (torch.randn(*shape) * 4).to(dtype)
    if op.endswith(("rows", "keepdim")) and len(shape) == 1:
        x = x[:-1].view(-1, 64)  # (a 1-d tensor's rows: one)
    elif len(shape) > 1:
        x[1, 0], x[2, -1] = float("nan"), float("-inf")  # a NaN row, an infinite one
    for _ in range(2):  # first and later calls of the signature
        got, want = run(mode, NORMS[op], x, fused=x.numel() > GRAIN)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        torch.testing.assert_close(got, want, equal_nan=True)
        assert_no_less_accurate(NORMS[op], x, got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_norm_overflow_and_calls_the_loops_do_not_take(dtype, mode):
    big = torch.full((GRAIN + 3,), torch.finfo(dtype).max / 2).to(dtype)  # squares past float32 (bf16) or the dtype
    got, want = run(mode, NORMS["vector_norm"], big)
    assert torch.equal(got.isinf(), want.isinf()), (got, want)
    torch.testing.assert_close(got, want)
    x = torch.randn(300, 200).to(dtype)
    for name, f in {"ord_1": lambda t: torch.linalg.vector_norm(t, 1), "ord_inf": lambda t: t.norm(float("inf")),
                    "leading_dim": lambda t: torch.linalg.vector_norm(t, dim=0),
                    "float32_result": lambda t: torch.linalg.vector_norm(t, dtype=torch.float32),
                    "transposed": lambda t: t.t().norm()}.items():
        got, want = run(mode, f, x, fused=False)
        torch.testing.assert_close(got, want, msg=name)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_norm_gradients_and_errors_as_on_cpu(dtype, mode):
    x = torch.randn(GRAIN + 9).to(dtype)
    grads = []
    for device in ("cpu", "mtia"):
        t = x.to(device).detach().requires_grad_()
        (torch.linalg.vector_norm(t) * 3).backward()
        grads.append(t.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
    for f in (lambda t: torch.linalg.vector_norm(t, dim=4), lambda t: torch.linalg.vector_norm(t, 1j),
              lambda t: torch.linalg.vector_norm(t, dtype=torch.int32)):
        with pytest.raises(Exception) as cpu_error:
            f(x)
        with pytest.raises(type(cpu_error.value)) as mtia_error:
            f(x.to("mtia"))
        assert str(mtia_error.value) == str(cpu_error.value)
    got, want = run(mode, NORMS["vector_norm"], x)  # the device stays usable
    torch.testing.assert_close(got, want)


ARGS = {
    "argmax": lambda x: x.argmax(),
    "argmin": lambda x: x.argmin(),
    "argmax_keepdim": lambda x: x.argmax(keepdim=True),
    "argmax_rows": lambda x: x.argmax(dim=-1),
    "argmin_rows_keepdim": lambda x: x.argmin(dim=x.dim() - 1, keepdim=True),
    "argmax_flat_dim_0": lambda x: x.view(-1).argmax(0),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(ARGS))
def test_argmax_argmin_match_cpu(op, shape, dtype, mode):
    # ties keep the first index (values rounded to the dtype tie often; +0
    # and -0 are equal); a NaN wins, the first one; +-inf; a row of one value
    torch.manual_seed(shape[1] + 1)
    x = torch.randint(-20, 20, shape).to(dtype) / 4
    rows, cols = shape
    x[1, cols // 2] = float("nan")
    x[1, -1] = float("nan")
    x[2, -1] = float("inf")
    x[3, 0] = float("-inf")
    x[4] = 7.0
    if rows > 6:
        x[5] = -0.0
        x[5, -1] = 0.0
    x[rows // 2 + 1, -1] = float("nan")  # (the second thread's part of a flattened call)
    for _ in range(2):  # first and later calls of the signature
        got, want = run(mode, ARGS[op], x)
        assert got.dtype == torch.int64 and torch.equal(got, want), op


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", ROW_SHAPES[1:4] + [(GRAIN + 5,)], ids=str)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim_values_and_indices_as_on_cpu(op, shape, dtype, mode):
    # values and indices of argmax/argmin's rule; a value is the element itself
    torch.manual_seed(len(shape))
    x = torch.randint(-20, 20, shape).to(dtype) / 4
    x.view(-1)[7] = float("nan")
    x.view(-1)[-1] = float("-inf") if op == "max" else float("inf")
    for keepdim in (False, True):  # (the first and a later call of the signature, each)
        for _ in range(2):
            n = C._fused_reduction_calls()
            values, indices = getattr(x.to("mtia"), op)(dim=-1, keepdim=keepdim)
            torch.mtia.synchronize()
            assert C._fused_reduction_calls() - n == (1 if mode == "fused" else 0)
            want_values, want_indices = getattr(x, op)(dim=-1, keepdim=keepdim)
            assert values.dtype == dtype and values.shape == want_values.shape
            assert torch.equal(indices.cpu(), want_indices)
            torch.testing.assert_close(values.cpu(), want_values, equal_nan=True, rtol=0, atol=0)
    grads = []
    for device in ("cpu", "mtia"):  # autograd scatters through the indices
        t = x.detach().to(device).requires_grad_()
        getattr(t, op)(dim=-1).values.float().nan_to_num().sum().backward()
        grads.append(t.grad.cpu())
    assert torch.equal(grads[1], grads[0])


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_argmax_every_position_and_calls_the_loops_do_not_take(dtype, mode):
    rows, cols = 2049, 33  # the largest at every position of a row, and a tie after it
    x = torch.zeros(rows, cols, dtype=dtype)
    x[torch.arange(rows), torch.arange(rows) % cols] = 3
    x[torch.arange(rows), (torch.arange(rows) + 5) % cols] = 3
    for op in ("argmax_rows", "argmin_rows_keepdim"):
        got, want = run(mode, ARGS[op], x if op.startswith("argmax") else -x)
        assert torch.equal(got, want), op
    y = torch.randn(300, 200).to(dtype)
    for name, f in {"leading_dim": lambda t: t.argmax(dim=0), "transposed": lambda t: t.t().argmax(dim=1),
                    "small": lambda t: t[:10].argmax(), "max_leading_dim": lambda t: t.max(dim=0).indices}.items():
        got, want = run(mode, f, y, fused=False)
        assert torch.equal(got, want), name
    with pytest.raises(IndexError) as cpu_error:
        y.argmax(dim=2)
    with pytest.raises(IndexError) as mtia_error:
        y.to("mtia").argmax(dim=2)
    assert str(mtia_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_every_row_element_counts(dtype, mode):
    rows, cols = 2049, 33  # one nonzero element a row, at every position
    x = torch.zeros(rows, cols, dtype=dtype)
    x[torch.arange(rows), torch.arange(rows) % cols] = 3
    for op in ("sum", "mean", "amax"):
        got, want = run(mode, ROW_OPS[op], x)
        assert torch.equal(got, want), op
    assert bool((run(mode, ROW_OPS["sum"], x)[0] == 3).all())
    got, want = run(mode, ROW_OPS["amin"], -x)
    assert torch.equal(got, want) and bool((got == -3).all())


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_argument_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    x = torch.randn(GRAIN + 5).to(dtype)
    m = x.to("mtia")
    for f in (lambda t: t.amax(dim=3), lambda t: t.view(-1, 5).mean(dim=(0, 0)), lambda t: t.sum(dim=2),
              lambda t: t.view(-1, 5).amax(dim=(1, -1)), lambda t: t.view(-1, 5).sum(dim=(-3, -1))):
        with pytest.raises(Exception) as cpu_error:
            f(x)
        with pytest.raises(type(cpu_error.value)) as mtia_error:
            f(m)
        assert str(mtia_error.value) == str(cpu_error.value)
    # and the device stays usable
    got, want = run(mode, OPS["mean"], x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_gradients_flow_through(dtype, mode):
    torch.manual_seed(2)
    x = torch.randn(GRAIN + 9).to(dtype)
    grads = []
    for device in ("cpu", "mtia"):
        t = x.to(device).detach().requires_grad_()
        (t.mean() * 3 + t.amax()).backward()
        grads.append(t.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_every_element_counts(dtype, mode):
    # one nonzero element, first, in the middle, in a vector's tail and last
    for n in SIZES:
        for pos in (0, n // 2, n - 17, n - 1):
            x = torch.zeros(n, dtype=dtype)
            x[pos] = 3
            for op in ("sum", "mean", "amax"):
                got, want = run(mode, OPS[op], x)
                assert torch.equal(got, want), (n, pos, op, got, want)
            x[pos] = -3
            got, want = run(mode, OPS["amin"], x)
            assert torch.equal(got, want) and got.item() == -3, (n, pos)


def test_loop_minimum_from_the_environment():
    # OPENMTIA_LOOP_MIN_ELEMENTS=0: tensors of any size take the loops (the
    # conformance run of tests/test_conformance.py relies on it); a bad value
    # warns and keeps the default
    code = ("import torch, openmtia; C = openmtia._C; x = torch.randn(10, dtype=torch.bfloat16, device='mtia'); "
            "n = C._fused_reduction_calls(), C._fused_arithmetic_calls(); y = (x.sum(), x + x); "
            "torch.mtia.synchronize(); "
            "print(C._loop_min_elements(), C._fused_reduction_calls() - n[0], C._fused_arithmetic_calls() - n[1])")
    run = lambda v: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   env=dict(os.environ, OPENMTIA_LOOP_MIN_ELEMENTS=v))
    assert run("0").stdout.split() == ["0", "1", "1"]
    r = run("-5")
    assert r.stdout.split() == [str(GRAIN), "0", "0"]
    assert "ignoring OPENMTIA_LOOP_MIN_ELEMENTS='-5'" in r.stderr
    with pytest.raises(RuntimeError, match="the loops' minimum must be >= 0, not -1"):
        C._set_loop_min_elements(-1)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_mse_loss_matches_cpu(n, dtype, reduction, mode):
    """mse_loss reduced over two alike tensors: the squared differences summed
    in float32 (CPU rounds each to the dtype first), as close to the float64
    result as CPU's, give or take one rounding."""
    torch.manual_seed(n)
    x, y = (torch.randn(n) * 2).to(dtype), torch.randn(n).to(dtype)
    f = lambda x, y: torch.nn.functional.mse_loss(x, y, reduction=reduction)
    got = low_precision_setting.on_mtia(C._fused_reduction_calls, 1 if mode == "fused" else 0, f, x, y).cpu()
    cpu, exact = f(x, y), f(x.double(), y.double())
    assert got.dtype == cpu.dtype == dtype and got.shape == cpu.shape == ()
    torch.testing.assert_close(got, cpu)
    assert abs(got.double() - exact) <= abs(cpu.double() - exact) + torch.finfo(dtype).eps * abs(exact)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mse_loss_specials_and_calls_the_loops_do_not_take(dtype, mode):
    x, y = torch.randn(GRAIN + 5).to(dtype), torch.randn(GRAIN + 5).to(dtype)
    f = lambda x, y: torch.nn.functional.mse_loss(x, y)
    for value in (float("nan"), float("inf")):
        xs = x.clone()
        xs[7] = value
        got = low_precision_setting.on_mtia(C._fused_reduction_calls, 1 if mode == "fused" else 0, f, xs, y).cpu()
        torch.testing.assert_close(got, f(xs, y), equal_nan=True)
    calls = {
        "none": lambda x, y: torch.nn.functional.mse_loss(x, y, reduction="none"),
        "broadcast": lambda x, y: torch.nn.functional.mse_loss(x.view(-1, 1)[:100], y[:7]),
        "strided": lambda x, y: torch.nn.functional.mse_loss(x[::2], y[::2]),
        "small": lambda x, y: torch.nn.functional.mse_loss(x[:100], y[:100]),
        "float32_target": lambda x, y: torch.nn.functional.mse_loss(x, y.float()),
    }
    for name, g in calls.items():
        if name == "broadcast":  # (F.mse_loss warns, on mtia as on CPU)
            with pytest.warns(UserWarning, match="target size"):
                got = low_precision_setting.on_mtia(C._fused_reduction_calls, 0, g, x, y).cpu()
            with pytest.warns(UserWarning, match="target size"):
                want = g(x, y)
        else:
            got, want = low_precision_setting.on_mtia(C._fused_reduction_calls, 0, g, x, y).cpu(), g(x, y)
        torch.testing.assert_close(got, want, msg=name)
    # gradients: CPU's mse_loss_backward, through autograd
    grads = []
    for device in ("cpu", "mtia"):
        t = x.detach().to(device).requires_grad_()
        f(t, y.to(device)).backward()
        grads.append(t.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


CUMULATIVE = {"cumsum": torch.cumsum, "cumprod": torch.cumprod}


def same_bits(got, want):
    """Bit for bit, NaN where CPU's is."""
    nan = want.isnan()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


# rows: fewer than the loops' 4 at a time, not a multiple of 4, one element,
# a row over a vector's tail, rows over the parallel threshold
@pytest.mark.parametrize("shape", [(2, GRAIN + 3), (1027, 33), (GRAIN + 1, 1), (13, 5, 517),
                                   (C._parallel_work() // 100 + 5, 100)], ids=str)
@pytest.mark.parametrize("op", list(CUMULATIVE))
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cumulative_over_the_last_dim_matches_cpu_bit_for_bit(op, shape, dtype, mode):
    # CPU's order: each row's elements in turn into a float32 accumulator,
    # each partial result rounded once
    f = CUMULATIVE[op]
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * (0.05 if op == "cumprod" else 3) + (1 if op == "cumprod" else 0)).to(dtype)
    flat = x.view(-1)
    flat[5], flat[shape[-1] + 2 if flat.numel() > shape[-1] + 2 else 0] = float("inf"), float("nan")
    for _ in range(2):  # (the signature's first call, then a later one)
        same_bits(*run(mode, lambda t: f(t, -1), x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cumulative_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = torch.randn(300, 200).to(dtype)
    for f in (lambda t: torch.cumsum(t, 0),  # not the last dim
              lambda t: torch.cumsum(t, -1, dtype=torch.float32),  # another dtype
              lambda t: torch.cumprod(t.t(), -1),  # not contiguous
              lambda t: torch.cumsum(t[:2, :3], 1)):  # under GRAIN elements
        got, want = run(mode, f, x, fused=False)
        same_bits(got, want) if got.dtype != torch.float32 else torch.testing.assert_close(got, want)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.cumsum(x.to("mtia"), 2)
    m = x.to("mtia").requires_grad_()
    torch.cumprod(m, -1).sum().backward()
    c = x.clone().requires_grad_()
    torch.cumprod(c, -1).sum().backward()
    same_bits(m.grad.cpu(), c.grad)


def prod_input(shape, seed=0):
    """Values near 1 (products that neither vanish nor overflow over long
    rows), an inf, a NaN and a zero among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 0.05 + 1
    flat = x.view(-1)
    flat[5], flat[-3], flat[flat.numel() // 2] = float("inf"), float("nan"), 0.0
    return x


# rows: under and over the loops' 8 or 16 side by side, rows shorter than
# CPU's 64-element block, a block and a tail, one element per row, rows over
# the parallel threshold
@pytest.mark.parametrize("shape", [(2, GRAIN + 3), (1027, 33), (GRAIN + 1, 1), (13, 5, 517), (40, 1024),
                                   (C._parallel_work() // 100 + 5, 100), (17, 4097)], ids=str)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_prod_over_the_last_dim_matches_cpu_bit_for_bit(shape, dtype, mode):
    # CPU's order: blocks of 64 into four 16-lane accumulators, each
    # product rounded to the dtype (prodLoop)
    x = prod_input(shape, seed=shape[-1]).to(dtype)
    for keepdim in (False, True, False):  # (the signature's first call, then later ones)
        same_bits(*run(mode, lambda t: t.prod(-1, keepdim=keepdim), x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_prod_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = prod_input((300, 200)).to(dtype)
    for f in (lambda t: t.prod(0),  # not the last dim
              lambda t: t.prod(1, dtype=torch.float32),  # another dtype
              lambda t: t.t().prod(1),  # not contiguous
              lambda t: t.reshape(1, -1).prod(1),  # one row (CPU: two passes)
              lambda t: t.prod(),  # every element
              lambda t: t[:2, :3].prod(1)):  # under GRAIN elements
        got, want = run(mode, f, x, fused=False)
        same_bits(got, want) if got.dtype != torch.float32 else torch.testing.assert_close(got, want, equal_nan=True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.to("mtia").prod(2)
    m = x.to("mtia").requires_grad_()
    m.prod(1).sum().backward()
    c = x.clone().requires_grad_()
    c.prod(1).sum().backward()
    torch.testing.assert_close(m.grad.cpu(), c.grad, equal_nan=True)


def test_prod_matches_cpu_at_atens_avx2_capability():
    # CPU's bf16/fp16 prod keeps 16-lane accumulators at ATen's AVX2
    # capability as at AVX512 (the loops assume it): checked in a process
    # started as a host without AVX-512
    code = ("import torch, openmtia\n"
            "for d in (torch.bfloat16, torch.float16):\n"
            "    x = (torch.randn(100, 1000, generator=torch.Generator().manual_seed(1)) * 0.05 + 1).to(d)\n"
            "    got = x.to('mtia').prod(1).cpu()\n"
            "    assert openmtia._C._fused_reduction_calls() > 0\n"
            "    assert torch.equal(got.view(torch.int16), x.prod(1).view(torch.int16)), d\n"
            "print(torch.backends.cpu.get_cpu_capability())")
    env = dict(os.environ, OPENMTIA_LOW_PRECISION="float32", ATEN_CPU_CAPABILITY="avx2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["AVX2"]


@pytest.mark.parametrize("shape", [(2, GRAIN + 3), (1027, 33), (GRAIN + 1, 1), (13, 5, 517)], ids=str)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cummax_cummin_over_the_last_dim_match_cpu_bit_for_bit(op, shape, dtype, mode):
    # CPU's scan: a NaN, or an element >= (cummin: <=) the running one, is
    # taken; ties (rounded values), +0 after -0, NaNs and infinities
    f = getattr(torch, op)
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * 3).round().to(dtype)
    flat = x.view(-1)
    for i, v in zip((3, 10, 11, 20, flat.numel() - 5, flat.numel() - 2),
                    (float("nan"), -0.0, 0.0, float("inf"), -float("inf"), float("nan"))):
        flat[i] = v
    for _ in range(2):  # (the signature's first call, then a later one)
        same_bits(*run(mode, lambda t: f(t, -1).values, x))
        assert torch.equal(*run(mode, lambda t: f(t, -1).indices, x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cummax_calls_the_loops_do_not_take_match_cpu(dtype, mode):
    x = (torch.randn(300, 200) * 3).round().to(dtype)
    for f in (lambda t: torch.cummax(t, 0),  # not the last dim
              lambda t: torch.cummin(t.t(), -1),  # not contiguous
              lambda t: torch.cummax(t[:2, :3], 1)):  # under GRAIN elements
        same_bits(*run(mode, lambda t: f(t).values, x, fused=False))
        assert torch.equal(*run(mode, lambda t: f(t).indices, x, fused=False))
    # out= tensors the loops do not take: values not contiguous, then fresh ones
    v, i = torch.empty(200, 300, dtype=dtype, device="mtia").t(), torch.empty(300, 200, dtype=torch.long, device="mtia")
    torch.cummax(x.to("mtia"), -1, out=(v, i))
    wv, wi = torch.cummax(x, -1)
    same_bits(v.cpu(), wv)
    assert torch.equal(i.cpu(), wi)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.cummax(x.to("mtia"), 2)
    m = x.to("mtia").requires_grad_()
    torch.cummax(m, -1).values.float().sum().backward()
    c = x.clone().requires_grad_()
    torch.cummax(c, -1).values.float().sum().backward()
    same_bits(m.grad.cpu(), c.grad)


COLUMN_OPS = {
    "sum": lambda x: x.sum(dim=0),
    "mean": lambda x: x.mean(dim=0),
    "amax": lambda x: x.amax(dim=0),
    "amin": lambda x: x.amin(dim=0),
    "mean_keepdim": lambda x: x.mean(dim=(0,), keepdim=True),
    "sum_first_two": lambda x: x.view(x.shape[0], 1, -1).sum(dim=(1, 0)),
    "amax_first_two_keepdim": lambda x: x.view(1, x.shape[0], -1).amax(dim=(-3, -2), keepdim=True),
}
# (rows, cols), each over GRAIN elements: columns around the vectors, a
# column of rows over 64 * 64 (the sums' two levels), columns split among
# the threads, one column
COLUMN_SHAPES = [(GRAIN + 1, 1), (2521, 13), (1929, 17), (33, 1025), (5000, 33), (64, 1024),
                 (C._parallel_work() // 1000 + 3, 1000)]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape", COLUMN_SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(COLUMN_OPS))
def test_reductions_over_leading_dims_match_cpu(op, shape, dtype, mode):
    torch.manual_seed(shape[1])
    x = (torch.randn(*shape) * 4).to(dtype)
    x[0, 0] = float("nan")  # a NaN column, an infinite one, one of both infinities
    x[1, -1] = float("inf")
    if shape[1] > 2:
        x[2, 1], x[3, 1] = float("inf"), float("-inf")
    reduction_matches_cpu(mode, op, COLUMN_OPS[op], x)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_leading_dims_the_loops_do_not_take_match_cpu(dtype, mode):
    x = (torch.rand(300, 200) + 0.5).to(dtype)  # (no cancellation: the sums agree whatever their order)
    for f in (lambda t: t.sum(dim=(0, 1)),  # every dim: the all-elements path
              lambda t: t.mean(dim=0, dtype=torch.float32),  # another dtype
              lambda t: t.t().amax(dim=0),  # not contiguous
              lambda t: t.view(2, 150, 200).sum(dim=(0, 2))):  # not the leading dims alone
        got, want = run(mode, f, x, fused=f(x).dim() == 0 and mode == "fused")
        torch.testing.assert_close(got, want, equal_nan=True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.to("mtia").sum(dim=(0, 5))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.to("mtia").amax(dim=(0, 0))


VARS = {
    "var": lambda x: x.var(),
    "std": lambda x: x.std(),
    "var_correction_0": lambda x: torch.var(x, correction=0),
    "std_correction_2.5": lambda x: torch.std(x, correction=2.5),
    "var_all_dims_keepdim": lambda x: x.view(-1, 1).var(dim=(0, 1), keepdim=True),
    "std_dim_none_keepdim": lambda x: x.view(1, -1).std(dim=None, keepdim=True),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", [GRAIN + 1, GRAIN + 1023, C._parallel_work() + 12345])
@pytest.mark.parametrize("op", sorted(VARS))
def test_var_std_of_every_element_match_cpu(op, n, dtype, mode):
    # var/std of every element: float32 partials added in double, one
    # rounding; within the dtype's tolerance of CPU's (which accumulates in
    # double), first and later calls
    f = VARS[op]
    for seed in (0, 1):
        g = torch.Generator().manual_seed(n + seed)
        x = (torch.randn(n, generator=g) * 3 + 100 * seed).to(dtype)  # (seed 1: a mean far from 0)
        got, want = run(mode, f, x)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_var_std_specials_and_overflow_as_on_cpu(dtype, mode):
    n = GRAIN + 100
    big = torch.finfo(dtype).max
    cases = {
        "near the largest": torch.full((n,), big / 2).to(dtype) * torch.tensor([1.0, -1.0]).repeat(n // 2).to(dtype),
        "nan": torch.ones(n, dtype=dtype).index_fill_(0, torch.tensor([77]), float("nan")),
        "inf": torch.ones(n, dtype=dtype).index_fill_(0, torch.tensor([n - 1]), float("inf")),
        "constant": torch.full((n,), 0.1, dtype=dtype),
    }
    if dtype == torch.bfloat16:  # a variance bf16 holds whose float32 sums overflow: computed in double
        cases["float32 overflows"] = (torch.tensor([1.5e19, -1.5e19]).repeat(n // 2)).to(dtype)
    for name, x in cases.items():
        for f in (lambda t: t.var(), lambda t: t.std(correction=0)):
            got, want = run(mode, f, x)
            assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf()), name
            torch.testing.assert_close(got, want, equal_nan=True, msg=name)
        if name == "float32 overflows":
            assert want.isfinite() and x.float().pow(2).sum().isinf()
    # degrees of freedom <= 0: CPU's kernel, its warning at the call; dims not all: CPU's kernel
    x = torch.randn(GRAIN + 1).to(dtype)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        got = x.to("mtia").var(correction=GRAIN + 1)
    assert got.cpu().isnan() or got.cpu().isinf()
    y = x[:-1].view(256, 128)
    got, want = run(mode, lambda t: t.var(0), y, fused=False)
    torch.testing.assert_close(got, want)


LOSSES = {
    "smooth_l1_mean": lambda x, y: F.smooth_l1_loss(x, y),
    "smooth_l1_sum_beta": lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.25),
    "huber_mean": lambda x, y: F.huber_loss(x, y),
    "huber_sum_delta": lambda x, y: F.huber_loss(x, y, reduction="sum", delta=2.5),
    "mse_mean": lambda x, y: F.mse_loss(x, y),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", [GRAIN + 1, GRAIN + 1023, C._parallel_work() + 12345])
@pytest.mark.parametrize("op", sorted(LOSSES))
def test_losses_match_cpu(op, n, dtype, mode):
    # the elementwise losses in float32 (CPU's formulas) summed as the sums
    # are: within the dtype's tolerance of CPU's (which rounds each to the
    # dtype first), and at least as close to the float64 result, give or take a rounding
    f = LOSSES[op]
    for seed in (0, 1):
        g = torch.Generator().manual_seed(n + seed)
        x, y = ((torch.randn(n, generator=g) * 2).to(dtype) for _ in range(2))
        got, want = run(mode, f, x, y)
        torch.testing.assert_close(got, want)
        exact = f(x.double(), y.double()).item()
        ulp = torch.finfo(dtype).eps * max(1.0, abs(exact))
        assert abs(got.double().item() - exact) <= abs(want.double().item() - exact) + ulp


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_losses_the_loops_do_not_take_and_specials(dtype, mode):
    x, y = (torch.randn(GRAIN + 9).to(dtype) for _ in range(2))
    x[3], y[4] = float("nan"), float("inf")
    for f in (LOSSES["smooth_l1_mean"], LOSSES["huber_sum_delta"]):
        got, want = run(mode, f, x, y)
        assert got.isnan() and want.isnan()
    for f in (lambda a, b: F.smooth_l1_loss(a, b, reduction="none"), lambda a, b: F.huber_loss(a, b[:1].expand_as(a))):
        got, want = run(mode, f, x, y, fused=False)
        torch.testing.assert_close(got, want, equal_nan=True)
    x[3], y[4] = 1.0, 2.0  # beta 0: torch's l1_loss, (x - y).abs().mean()
    f = lambda a, b: F.smooth_l1_loss(a, b, beta=0.0)
    torch.testing.assert_close(f(x.to("mtia"), y.to("mtia")).cpu(), f(x, y))
    with pytest.raises(RuntimeError, match="huber_loss does not support non-positive values for delta"):
        F.huber_loss(x.to("mtia"), y.to("mtia"), delta=-1.0)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("n", [GRAIN + 129, C._parallel_work() + 12345])
def test_nansum_matches_cpu(n, dtype, mode):
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * 4).to(dtype)
    x[::97] = float("nan")
    for f, fused in ((torch.nansum, True), (lambda t: t.view(-1, 1).nansum((0, 1), keepdim=True), True),
                     (lambda t: t[: (n // 128) * 128].view(-1, 128).nansum(-1), True),
                     (lambda t: t[: (n // 128) * 128].view(-1, 128).nansum(0), False),
                     (lambda t: t.nansum(dtype=torch.float32), False)):
        got, want = run(mode, f, x, fused=fused)
        torch.testing.assert_close(got, want)
    x[5] = float("inf")
    got, want = run(mode, torch.nansum, x)
    assert got.isinf() and want.isinf()
