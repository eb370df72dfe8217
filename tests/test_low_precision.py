"""bf16/fp16 matrix ops (csrc/aten/low_precision/low_precision.h): both paths, forced on any host
(OPENMTIA_LOW_PRECISION), against CPU PyTorch in the same dtype."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import openmtia
import openmtia._C_test as C_test  # the test-only module

import low_precision_setting

C = openmtia._C
LOW = [torch.bfloat16, torch.float16]


@pytest.fixture(params=low_precision_setting.modes())
def mode(request):
    # the float32 path under each ISA of the conversions' loops (none: ATen's copy)
    for mode, _ in low_precision_setting.setting(request.param):
        yield mode


def positive(*shape, dtype):
    # no cancellation: sums of positive terms agree to a few ulps whatever the
    # order of accumulation, so CPU's default tolerances of the dtype apply
    return (torch.rand(*shape) + 0.5).to(dtype)


def close(mtia, cpu):
    assert mtia.device.type == "mtia"
    assert mtia.dtype == cpu.dtype, (mtia.dtype, cpu.dtype)
    torch.testing.assert_close(mtia.cpu(), cpu, equal_nan=True)


def calls(mode, f):
    """Runs f and checks which path it took."""
    n = C._low_precision_float32_calls()
    out = f()
    torch.mtia.synchronize()  # (counted when the task runs)
    took = C._low_precision_float32_calls() - n
    if mode == "float32":
        assert took > 0, "the float32 path did not run"
    else:
        assert took == 0, "the native path ran float32"
    return out


CASES = {
    "mm": lambda d, t: torch.mm(t(7, 13, dtype=d), t(13, 5, dtype=d)),
    "mm_large": lambda d, t: torch.mm(t(64, 300, dtype=d), t(300, 33, dtype=d)),
    "mm_transposed": lambda d, t: torch.mm(t(13, 7, dtype=d).t(), t(5, 13, dtype=d).t()),
    "addmm": lambda d, t: torch.addmm(t(5, dtype=d), t(7, 13, dtype=d), t(13, 5, dtype=d), beta=0.5, alpha=2.0),
    "bmm": lambda d, t: torch.bmm(t(3, 7, 13, dtype=d), t(3, 13, 5, dtype=d)),
    "baddbmm": lambda d, t: torch.baddbmm(t(3, 7, 5, dtype=d), t(3, 7, 13, dtype=d), t(3, 13, 5, dtype=d),
                                          beta=0.25, alpha=1.5),
    "addbmm": lambda d, t: torch.addbmm(t(7, 5, dtype=d), t(3, 7, 13, dtype=d), t(3, 13, 5, dtype=d)),
    "matmul_3d_2d": lambda d, t: torch.matmul(t(2, 7, 13, dtype=d), t(13, 5, dtype=d)),
    "linear": lambda d, t: F.linear(t(4, 9, dtype=d), t(6, 9, dtype=d), t(6, dtype=d)),
    "conv2d": lambda d, t: F.conv2d(t(2, 3, 9, 8, dtype=d), t(4, 3, 3, 3, dtype=d), t(4, dtype=d), padding=1),
    "conv1d_stride": lambda d, t: F.conv1d(t(2, 4, 17, dtype=d), t(6, 2, 5, dtype=d), stride=2, groups=2),
    "mm_1x1": lambda d, t: torch.mm(t(1, 1, dtype=d), t(1, 1, dtype=d)),
    "mm_k0": lambda d, t: torch.mm(t(3, 0, dtype=d), t(0, 4, dtype=d)),
    "bmm_empty_batch": lambda d, t: torch.bmm(t(0, 3, 4, dtype=d), t(0, 4, 2, dtype=d)),
}


def run_both(case, dtype, mode):
    torch.manual_seed(0)
    made = []

    def t(*shape, dtype):
        x = positive(*shape, dtype=dtype)
        made.append(x)
        return x

    cpu = CASES[case](dtype, t)
    it = iter(made)
    mtia = calls(mode, lambda: CASES[case](dtype, lambda *s, dtype: next(it).to("mtia")))
    return mtia, cpu


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matrix_ops_match_cpu(case, dtype, mode):
    mtia, cpu = run_both(case, dtype, mode)
    close(mtia, cpu)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_first_and_later_calls_of_a_signature(dtype, mode):
    # the first call of a signature takes another path in the fallback
    for _ in range(3):
        mtia, cpu = run_both("mm_large", dtype, mode)
        close(mtia, cpu)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_nan_and_inf_propagate_as_on_cpu(dtype, mode):
    a = positive(6, 8, dtype=dtype)
    b = positive(8, 5, dtype=dtype)
    a[1, 2] = float("nan")
    a[3, 0] = float("inf")
    b[4, 4] = float("-inf")
    b[0, 1] = torch.finfo(dtype).max  # overflows to inf in the result
    cpu = a @ b
    mtia = calls(mode, lambda: a.to("mtia") @ b.to("mtia"))
    close(mtia, cpu)
    assert torch.equal(mtia.cpu().isnan(), cpu.isnan()) and torch.equal(mtia.cpu().isinf(), cpu.isinf())


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_no_less_accurate_than_cpu(dtype, mode):
    # with cancellation (normal inputs), against float64: one rounding of a
    # float32 accumulation is at least as accurate as CPU's own kernel
    torch.manual_seed(1)
    a, b = torch.randn(48, 256).to(dtype), torch.randn(256, 40).to(dtype)
    exact = a.double() @ b.double()
    cpu_err = (((a @ b).double() - exact).abs() / exact.abs().clamp_min(1)).max().item()
    mtia = calls(mode, lambda: a.to("mtia") @ b.to("mtia"))
    err = ((mtia.cpu().double() - exact).abs() / exact.abs().clamp_min(1)).max().item()
    assert err <= cpu_err + torch.finfo(dtype).eps, (err, cpu_err)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_training_step_under_autocast_matches_cpu(dtype, mode):
    # forward and backward of linear and conv under autocast: the output and
    # gradient dtypes are autocast's, the values CPU's
    torch.manual_seed(2)
    conv, lin = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4 * 6 * 6, 5)
    x = torch.rand(2, 3, 8, 8)
    results = {}
    n = C._low_precision_float32_calls()
    for device in ("cpu", "mtia"):
        c, l = (torch.nn.Conv2d(3, 4, 3).to(device), torch.nn.Linear(4 * 6 * 6, 5).to(device))
        c.load_state_dict(conv.state_dict())
        l.load_state_dict(lin.state_dict())
        with torch.autocast(device, dtype=dtype):
            h = c(x.to(device))
            y = l(h.flatten(1))
        assert h.dtype == dtype and y.dtype == dtype
        y.float().pow(2).sum().backward()
        results[device] = (y, c.weight.grad, l.weight.grad, l.bias.grad)
    torch.mtia.synchronize()
    took = C._low_precision_float32_calls() - n  # the mtia pass's matrix ops, forward and backward
    assert took == 5 if mode == "float32" else took == 0, took  # conv, addmm; their backward: conv, 2 mm
    for m, c in zip(results["mtia"], results["cpu"]):
        torch.testing.assert_close(m.cpu(), c, rtol=2e-2, atol=2e-2)


def test_the_path_follows_the_mode():
    before = C._low_precision_mode()
    try:
        for dtype in LOW:
            C._set_low_precision_mode("float32")
            assert C._low_precision_path(dtype) == "float32"
            C._set_low_precision_mode("native")
            assert C._low_precision_path(dtype) == "native"
        C._set_low_precision_mode("float32")
        assert C._low_precision_path(torch.float32) == "native"  # only bf16 and fp16 have two paths
        with pytest.raises(RuntimeError, match="OPENMTIA_LOW_PRECISION must be auto, float32 or native, not 'fast'"):
            C._set_low_precision_mode("fast")
    finally:
        C._set_low_precision_mode(before)


def test_auto_follows_the_host_and_atens_capability():
    flags = open("/proc/cpuinfo").read().split()
    code = ("import torch, openmtia; C = openmtia._C; "
            "print(C._low_precision_mode(), C._low_precision_path(torch.bfloat16), C._low_precision_path(torch.float16))")
    env = dict(os.environ, OPENMTIA_LOW_PRECISION="auto")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    bf16 = "native" if avx512 and ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"
    fp16 = "native" if avx512 and ("avx512_fp16" in flags or "amx_fp16" in flags) else "float32"
    assert out.split() == ["auto", bf16, fp16]
    # ATen limited to AVX2 (as on a host without AVX-512): float32 for both
    env["ATEN_CPU_CAPABILITY"] = "avx2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["auto", "float32", "float32"]
    # forced, and a bad value: a warning, then auto
    env.pop("ATEN_CPU_CAPABILITY")
    env["OPENMTIA_LOW_PRECISION"] = "native"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["native", "native", "native"]
    env["OPENMTIA_LOW_PRECISION"] = "fast"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.split()[0] == "auto"
    assert "ignoring OPENMTIA_LOW_PRECISION='fast'" in r.stderr


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mixed_dtypes_raise_as_on_cpu(dtype, mode):
    a, b = positive(3, 4, dtype=dtype), torch.rand(4, 2)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.mm(a, b)
    with pytest.raises(RuntimeError) as mtia_error:
        torch.mm(a.to("mtia"), b.to("mtia"))
    assert str(mtia_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_shape_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    a, b = positive(3, 4, dtype=dtype), positive(5, 2, dtype=dtype)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x2\)"):
        torch.mm(a.to("mtia"), b.to("mtia"))
    # and the device stays usable
    close(a.to("mtia") @ a.t().to("mtia"), a @ a.t())


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_in_place_and_out_overloads_match_cpu(dtype, mode):
    # the float32 path rounds the written argument once; an out= argument of
    # the wrong size is resized as CPU resizes it; first and later calls
    a, b, c = positive(7, 13, dtype=dtype), positive(13, 5, dtype=dtype), positive(7, 5, dtype=dtype)
    for _ in range(2):
        cpu = c.clone().addmm_(a, b, beta=0.5)
        m = c.to("mtia")
        r = calls(mode, lambda: m.addmm_(a.to("mtia"), b.to("mtia"), beta=0.5))
        assert r is m
        close(m, cpu)
        out = torch.empty(7, 5, dtype=dtype, device="mtia")
        r = calls(mode, lambda: torch.mm(a.to("mtia"), b.to("mtia"), out=out))
        assert r is out
        close(out, a @ b)
        out = torch.empty(0, dtype=dtype, device="mtia")
        calls(mode, lambda: torch.bmm(a[None].to("mtia"), b[None].to("mtia"), out=out))
        close(out, torch.bmm(a[None], b[None]))


@pytest.mark.needs_async
@pytest.mark.allocator_state
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_queued_calls_share_their_float32_scratch_and_stay_correct(dtype):
    """The float32 stand-ins of a call are freed once its task is launched:
    stream-ordered, later calls reuse their blocks. Held by each queued task,
    they grew the device pool (and the host's page faults) with the queue."""
    before = C._low_precision_mode()
    C._set_low_precision_mode("float32")
    try:
        torch.manual_seed(0)
        a_cpu, b_cpu = positive(256, 64, dtype=dtype), positive(64, 128, dtype=dtype)
        a, b = a_cpu.to("mtia"), b_cpu.to("mtia")
        torch.mm(a, b)  # the signature's first call
        torch.mtia.synchronize()
        allocated = lambda: torch.mtia.memory_stats()["allocated_bytes.all.current"]
        base = allocated()
        gate = C_test.launch_blocking_task(a.device.index, 30.0)  # holds the stream: the calls queue up
        try:
            outs = [torch.mm(a * (i + 1), b) for i in range(40)]  # each call: a, a*(i+1) and its output scratch
            grown = allocated() - base
        finally:
            gate.release()
        torch.mtia.synchronize()
        per_call = (256 * 64 + 64 * 128 + 256 * 128) * 4  # the float32 stand-ins of one call
        # the 40 outputs and a*(i+1) are held by the test; the stand-ins are not
        held = 40 * (256 * 128 + 256 * 64) * dtype.itemsize
        assert grown < held + 4 * per_call, (grown, held, per_call)
        for i, out in enumerate(outs):
            close(out, torch.mm(a_cpu * (i + 1), b_cpu))
    finally:
        C._set_low_precision_mode(before)


# bmm and baddbmm in float32 run chunked (entries converted, multiplied and
# rounded a few at a time on each thread) where the entries share evenly
# among the threads; shapes that take each branch: one parallel region, several
# sub-chunks per thread, entries larger than a thread's buffer, broadcast and
# ignored (beta=0) self, strided operands and outputs, in place, an odd batch
# (the whole-tensor path). A call below kParallelWork / kDenseWorkScale
# operand elements (kernel_threads.cpp) runs on one thread.
def nan_self(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


CHUNKED = {
    "bmm": lambda d, t: torch.bmm(t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d)),
    "bmm_serial": lambda d, t: torch.bmm(t(5, 7, 13, dtype=d), t(5, 13, 6, dtype=d)),
    "bmm_sub_chunks": lambda d, t: torch.bmm(t(8, 256, 128, dtype=d), t(8, 128, 256, dtype=d)),
    "bmm_large_entries": lambda d, t: torch.bmm(t(2, 512, 256, dtype=d), t(2, 256, 512, dtype=d)),
    "bmm_odd_batch": lambda d, t: torch.bmm(t(3, 256, 128, dtype=d), t(3, 128, 256, dtype=d)),
    "bmm_strided": lambda d, t: torch.bmm(t(32, 40, 48, dtype=d).transpose(1, 2),
                                          t(40, 32, 32, dtype=d).permute(1, 0, 2)),
    "baddbmm": lambda d, t: torch.baddbmm(t(32, 48, 32, dtype=d), t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d),
                                          beta=0.5, alpha=1.5),
    "baddbmm_broadcast_self": lambda d, t: torch.baddbmm(t(48, 32, dtype=d), t(32, 48, 40, dtype=d),
                                                         t(32, 40, 32, dtype=d), beta=2.0),
    "baddbmm_self_batch_1": lambda d, t: torch.baddbmm(t(1, 48, 32, dtype=d), t(32, 48, 40, dtype=d),
                                                       t(32, 40, 32, dtype=d), alpha=-1),
    "baddbmm_beta_0_ignores_nan": lambda d, t: torch.baddbmm(t(32, 48, 32, dtype=d, make=nan_self),
                                                             t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d), beta=0),
    "baddbmm_in_place": lambda d, t: t(32, 48, 32, dtype=d).baddbmm_(t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d),
                                                                     beta=0.25),
    "bmm_out_strided": lambda d, t: torch.bmm(t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d),
                                              out=t(32, 32, 48, dtype=d).transpose(1, 2)),
    "baddbmm_out": lambda d, t: torch.baddbmm(t(32, 48, 32, dtype=d), t(32, 48, 40, dtype=d), t(32, 40, 32, dtype=d),
                                              out=t(32, 48, 32, dtype=d)),
}


def chunks(n, operand_elements):
    """Whether low_precision.cpp's rule runs a call of n entries chunked."""
    work = operand_elements * C._dense_work_scale()
    threads = torch.get_num_threads() if work >= C._parallel_work() else 1
    return n % threads == 0 or n >= 4 * threads


# The host GEMM (csrc/aten/host_gemm.h) takes a chunked call's entries where each
# entry of its operands and output is one run of memory (row- or
# column-major: bmm_out_strided's output) and their float32 stand-ins fit
# one thread's buffer (kChunkElements, 256K, in low_precision.cpp); the
# cases it does not take run ATen's bmm per chunk.
NOT_HOST_GEMM = {
    "bmm_strided": "b's entries (permute(1, 0, 2)) are not one run each",
    "bmm_large_entries": "1.5 MB of float32 stand-ins an entry, beyond one thread's buffer",
}


@pytest.fixture(params=["host_gemm", "aten_bmm"])
def host_gemm(request):
    before = C._host_gemm()
    assert C._set_host_gemm(request.param == "host_gemm"), "this host has no BLAS to call (libtorch_cpu's sgemm_)"
    try:
        yield request.param == "host_gemm"
    finally:
        C._set_host_gemm(before)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("case", sorted(CHUNKED))
def test_batched_matrix_ops_chunked_match_cpu(case, dtype, mode, host_gemm):
    torch.manual_seed(3)
    made = []

    def t(*shape, dtype, make=positive):
        x = make(*shape, dtype=dtype)
        made.append(x.clone())  # (the in-place case writes x)
        return x

    cpu = CHUNKED[case](dtype, t)
    operands = made[:]
    if "nan" in case:
        assert cpu.isfinite().all()  # CPU ignores self at beta=0
    for call in range(2):  # the signature's first call (synchronous), then a task
        before, entries = C._low_precision_chunked_calls(), C._low_precision_gemm_entries()
        it = iter([x.to("mtia") for x in operands])
        mtia = calls(mode, lambda: CHUNKED[case](dtype, lambda *s, dtype, make=None: next(it)))
        close(mtia, cpu)
        took = C._low_precision_chunked_calls() - before
        n = operands[-1].shape[0] if operands[-1].dim() == 3 else operands[1].shape[0]
        expected = mode == "float32" and chunks(n, sum(x.numel() for x in operands))
        # (a first call runs synchronously, on the whole tensors, where the
        # signature is new to the plan cache: earlier tests may have seen it)
        assert took == (1 if expected else 0) or (call == 0 and took == 0), (took, expected)
        gemm = host_gemm and case not in NOT_HOST_GEMM and C._activation_isa() != "none"
        assert C._low_precision_gemm_entries() - entries == (n if took and gemm else 0), (case, gemm)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("isa", ["avx2"] + (["avx512"] if low_precision_setting.HOST_AVX512 else []) + ["none"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_chunked_conversions_keep_specials_and_tails(dtype, isa, layout):
    """The chunked path converts with the fused kernel's loops (ISA avx2 or
    avx512; none: ATen's copy): NaN, inf, overflow to inf, signed zeros and
    entries whose element counts are not a multiple of the vector width.
    Transposed operands (attention's q @ k^T) keep their layout in float32
    and convert as one run of memory."""
    before, before_isa = C._low_precision_mode(), C._activation_isa()
    C._set_low_precision_mode("float32")
    C._set_activation_isa(isa)
    try:
        torch.manual_seed(4)
        for shape_a, shape_b in (((33, 5, 7), (33, 7, 3)), ((66, 33, 17), (66, 17, 31))):
            if layout == "transposed":
                a = positive(shape_a[0], shape_a[2], shape_a[1], dtype=dtype).transpose(1, 2)
                b = positive(shape_b[0], shape_b[2], shape_b[1], dtype=dtype).transpose(1, 2)
            else:
                a, b = positive(*shape_a, dtype=dtype), positive(*shape_b, dtype=dtype)
            a[0, 1, 2], a[3, 0, 0], b[5, 2, 1] = float("nan"), float("inf"), float("-inf")
            b[7, 0, 0] = torch.finfo(dtype).max  # overflows to inf in the result
            a[9].zero_()
            b[9].neg_()  # -0.0 sums in entry 9: CPU gives +0 or -0, compared below
            cpu = torch.bmm(a, b)
            work = (a.numel() + b.numel() + cpu.numel()) * C._dense_work_scale()
            assert (work >= C._parallel_work()) == (shape_a[0] == 66)  # one call on one thread, one on all
            for _ in range(2):
                n, entries = C._low_precision_chunked_calls(), C._low_precision_gemm_entries()
                ma, mb = a.to("mtia"), b.to("mtia")
                assert ma.stride() == a.stride() and mb.stride() == b.stride()
                mtia = torch.bmm(ma, mb)
                torch.mtia.synchronize()
                got = mtia.cpu()
                torch.testing.assert_close(got, cpu, equal_nan=True)
                assert torch.equal(got.isnan(), cpu.isnan()) and torch.equal(got.isinf(), cpu.isinf())
                assert torch.equal(got[9].signbit(), cpu[9].signbit())
            assert C._low_precision_chunked_calls() - n == 1
            # (the host GEMM's entries: with the loops, each entry one run)
            assert C._low_precision_gemm_entries() - entries == (0 if isa == "none" else shape_a[0])
    finally:
        C._set_activation_isa(before_isa)
        C._set_low_precision_mode(before)
