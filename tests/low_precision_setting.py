"""The low-precision paths the tests run (csrc/aten/low_precision/*.h): the mode
(OPENMTIA_LOW_PRECISION) and the vector loops' ISA, set for one test."""
import openmtia
import pytest
import torch

C = openmtia._C
HOST_AVX512 = all(f in open("/proc/cpuinfo").read().split() for f in ("avx512f", "avx512bw"))


def modes(none=True):
    """The loops at 8 lanes, at 16 where the host has them (CI refuses
    skipped tests), CPU's kernels (native), and no ISA (CPU's kernels too)."""
    return ["float32-avx2"] + (["float32-avx512"] if HOST_AVX512 else []) + ["native"] + (
        ["float32-none"] if none else [])


def setting(param):
    """For a fixture: sets `param` ("float32-avx2", "native", ...), yields
    (mode, isa) once, then restores both."""
    mode, _, isa = param.partition("-")
    before, before_isa = C._low_precision_mode(), C._activation_isa()
    C._set_low_precision_mode(mode)
    if isa:
        C._set_activation_isa(isa)
    try:
        yield mode, isa
    finally:
        C._set_activation_isa(before_isa)
        C._set_low_precision_mode(before)


@pytest.fixture(params=modes())
def fused_or_cpu(request):
    """A test's `mode` (mode = low_precision_setting.fused_or_cpu): "fused"
    where the vector loops run in the setting, else "cpu" (CPU's kernels)."""
    for each in setting(request.param):
        yield "fused" if fused(*each) else "cpu"


@pytest.fixture(params=["float32", "native"])
def float32_or_native(request):
    """A test's `mode` (mode = low_precision_setting.float32_or_native): the
    float32 path (stand-ins, int16 views), then CPU's kernels of the dtype."""
    for mode, _ in setting(request.param):
        yield mode


def fused(mode, isa):
    """Whether the loops run in this setting."""
    return mode == "float32" and isa != "none"


def on_mtia(calls, expect, f, *args):
    """f over args (tensors moved to mtia), synchronized: checks that the
    counter `calls` (e.g. C._fused_arithmetic_calls) grew by `expect` and
    returns the result (or results), on mtia."""
    n = calls()
    got = f(*[a.to("mtia") if isinstance(a, torch.Tensor) else a for a in args])
    torch.mtia.synchronize()
    assert calls() - n == expect, (calls() - n, expect)
    for t in got if isinstance(got, tuple) else (got,):  # (a tuple: undefined results are None)
        assert t is None or t.device.type == "mtia"
    return got

