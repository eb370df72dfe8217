"""bf16/fp16 activations (csrc/low_precision_activations.h): the fused kernel
(mode float32, what a host without native low precision runs) and CPU's
kernels (mode native), forced on any host, against CPU PyTorch."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import openmtia

C = openmtia._C
A = torch.ops.aten
LOW = [torch.bfloat16, torch.float16]
MODES = ["float32", "native"]
# sizes around the 16- and 8-element blocks, and one that runs on every thread
SIZES = [1, 7, 8, 15, 16, 17, 33, 1000, 300_001]

OPS = {
    "gelu": (lambda g, x: F.gelu(x), False),
    "gelu_tanh": (lambda g, x: F.gelu(x, approximate="tanh"), False),
    "silu": (lambda g, x: F.silu(x), False),
    "sigmoid": (lambda g, x: torch.sigmoid(x), False),
    "gelu_backward": (lambda g, x: A.gelu_backward(g, x), True),
    "gelu_tanh_backward": (lambda g, x: A.gelu_backward(g, x, approximate="tanh"), True),
    "sigmoid_backward": (lambda g, y: A.sigmoid_backward(g, y), True),
}


@pytest.fixture(params=MODES)
def mode(request):
    before = C._low_precision_mode()
    C._set_low_precision_mode(request.param)
    yield request.param
    C._set_low_precision_mode(before)


def fused_calls(mode, f, expect=True):
    """Runs f on mtia and checks which kernel it took."""
    n = C._fused_activation_calls()
    out = f()
    took = C._fused_activation_calls() - n
    if mode == "float32" and expect:
        assert took > 0, "the fused kernel did not run"
    else:
        assert took == 0, "the fused kernel ran"
    return out


def inputs(op, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 4
    if op == "sigmoid_backward":
        x = torch.sigmoid(x)  # its second operand is the forward's result
    return torch.randn(n, generator=g).to(dtype), x.to(dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_activation_matches_cpu(op, dtype, n, mode):
    # the fused kernel: CPU's numerics (float32 math, one rounding to the
    # dtype) within the dtype's tolerances, and close to CPU's own kernel of
    # the dtype (which may round twice: fp16 sigmoid_backward); the native
    # path: CPU's kernel of the dtype (bit for bit where mtia runs it on as
    # many threads as CPU: ATen's vector and tail loops differ in the last
    # bit). The first call of a signature and a later one.
    f, _ = OPS[op]
    for seed in (0, 1):
        g, x = inputs(op, n, dtype, seed)
        mtia = fused_calls(mode, lambda: f(g.to("mtia"), x.to("mtia")))
        assert mtia.device.type == "mtia" and mtia.dtype == dtype and mtia.shape == x.shape
        if mode == "native":
            exact = n <= 32768
            torch.testing.assert_close(mtia.cpu(), f(g, x), atol=0 if exact else None, rtol=0 if exact else None)
            continue
        torch.testing.assert_close(mtia.cpu(), f(g.float(), x.float()).to(dtype))
        torch.testing.assert_close(mtia.cpu(), f(g, x), atol=1e-5, rtol=2e-3 if dtype == torch.float16 else 1.6e-2)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_nan_inf_and_extremes_as_on_cpu(op, dtype, mode):
    # CPU's fp16 kernels compute ATen's formulas in float32 (its float32 and
    # bf16 gelu give NaN for +inf where the formula, fp16 and CUDA give inf)
    f, _ = OPS[op]
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 12.0, -12.0, 30.0, -30.0, 1e-3, -1e-3,
               6e4, -6e4, 5.0, -5.0, 0.5]
    x = torch.tensor(special * 2)  # 32: the 16-element blocks and the tail path
    g = torch.linspace(-2, 2, x.numel())
    if op == "sigmoid_backward":
        x = torch.sigmoid(x)
    g, x = g.to(dtype), x.to(dtype)
    expected = f(g.half(), x.half()).float()
    mtia = fused_calls(mode, lambda: f(g.to("mtia"), x.to("mtia"))).cpu().float()
    if op in ("gelu", "gelu_backward") and mode == "native" and dtype == torch.bfloat16:
        expected = f(g.to(dtype), x.to(dtype)).float()  # CPU's own bf16 kernel
    assert torch.equal(mtia.isnan(), expected.isnan()), (mtia, expected)
    assert torch.equal(mtia.isinf(), expected.isinf()), (mtia, expected)
    torch.testing.assert_close(mtia, expected, equal_nan=True, atol=1e-5, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_in_place_forms(dtype, mode):
    for op, ref in ((A.gelu_, F.gelu), (A.silu_, F.silu), (A.sigmoid_, torch.sigmoid)):
        x = (torch.randn(1001) * 3).to(dtype)
        m = x.to("mtia")
        ptr, version = m.data_ptr(), m._version
        r = fused_calls(mode, lambda: op(m))
        assert r is m and m.data_ptr() == ptr and m._version == version + 1
        torch.testing.assert_close(m.cpu(), ref(x.float()).to(dtype) if mode == "float32" else ref(x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_other_layouts_take_cpus_kernel(dtype, mode):
    # non-contiguous operands, mixed dtypes, float32: the boxed
    # fallback (CPU's kernel), with CPU's results
    x = (torch.randn(40, 30) * 3).to(dtype)
    cases = [
        (lambda t: F.gelu(t.t()), x),
        (lambda t: torch.sigmoid(t[:, ::2]), x),
        (lambda t: A.gelu_backward(torch.ones(30, 40, dtype=dtype, device=t.device).t(), t), x),
        (lambda t: F.silu(t), x.float()),
    ]
    for f, t in cases:
        mtia = fused_calls(mode, lambda: f(t.to("mtia")), expect=False)
        torch.testing.assert_close(mtia.cpu(), f(t))
    g = torch.randn(40, 30, dtype=torch.float32)
    mtia = fused_calls(mode, lambda: A.gelu_backward(g.to("mtia"), x.to("mtia")), expect=False)
    torch.testing.assert_close(mtia.cpu(), A.gelu_backward(g, x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_argument_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    x = torch.randn(20).to(dtype)
    with pytest.raises(RuntimeError) as cpu:
        F.gelu(x, approximate="fast")
    with pytest.raises(RuntimeError) as mtia:
        F.gelu(x.to("mtia"), approximate="fast")
    assert str(mtia.value).splitlines()[0] == str(cpu.value).splitlines()[0]
    with pytest.raises(RuntimeError) as cpu:
        A.gelu_backward(torch.ones(7, dtype=dtype), x)
    with pytest.raises(RuntimeError) as mtia:
        A.gelu_backward(torch.ones(7, dtype=dtype, device="mtia"), x.to("mtia"))
    assert str(mtia.value).splitlines()[0] == str(cpu.value).splitlines()[0]
    assert torch.equal(F.gelu(x.to("mtia")).cpu(), F.gelu(x.to("mtia")).cpu())  # the device stays usable


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_training_through_activations_under_autocast(dtype, mode):
    # an MLP with GELU, SiLU and a sigmoid gate: forward and backward under
    # autocast (the activations run in the dtype), gradients close to CPU's
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128), torch.nn.SiLU(),
                              torch.nn.Linear(128, 64), torch.nn.Sigmoid())
    x = torch.randn(32, 64)
    grads = {}
    for device in ("cpu", "mtia"):
        m = torch.nn.Sequential(*[type(l)(*([l.in_features, l.out_features] if isinstance(l, torch.nn.Linear) else []))
                                  for l in net]).to(device)
        m.load_state_dict(net.state_dict())
        with torch.autocast(device, dtype=dtype):
            y = m(x.to(device))
        assert y.dtype == dtype
        y.float().sum().backward()
        grads[device] = [y] + [p.grad for p in m.parameters()]
    for a, b in zip(grads["mtia"], grads["cpu"]):
        torch.testing.assert_close(a.cpu(), b, rtol=3e-2, atol=3e-2)


def test_the_path_follows_the_mode_and_atens_capability():
    code = ("import torch, openmtia; C = openmtia._C; "
            "print(C._activation_path(torch.bfloat16), C._activation_path(torch.float16), "
            "C._activation_path(torch.float32))")
    env = dict(os.environ, OPENMTIA_LOW_PRECISION="auto", ATEN_CPU_CAPABILITY="avx2")
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()
    assert run() == ["float32", "float32", "native"]  # ATen below AVX512, no native low precision
    env["OPENMTIA_LOW_PRECISION"] = "native"
    assert run() == ["native", "native", "native"]
    env["OPENMTIA_LOW_PRECISION"] = "float32"
    env.pop("ATEN_CPU_CAPABILITY")
    assert run() == ["float32", "float32", "native"]
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        env["OPENMTIA_LOW_PRECISION"] = "auto"  # ATen's 16-lane kernels: CPU's
        assert run() == ["native", "native", "native"]
