"""bf16/fp16 activations (csrc/aten/low_precision/activations.h): the fused kernel
(mode float32, what a host without native low precision runs) and CPU's
kernels (mode native), forced on any host, against CPU PyTorch."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import openmtia

import low_precision_setting

C = openmtia._C
A = torch.ops.aten
LOW = [torch.bfloat16, torch.float16]
# the fused kernel at 8 lanes (AVX2) and 16 (AVX-512: only where the host
# has it, so that a host without it runs every test it lists), and CPU's
# sizes around the 32- and 16-element blocks (above the small-op path's
# 32768), and one that runs on every thread for every op (a memory-bound
# op's element counts as one unit of work, a transcendental one's as four:
# low_precision_activations.cpp)
GRAIN = 32768
SIZES = [GRAIN + k for k in (1, 7, 8, 15, 16, 17, 31, 32, 33)] + [max(C._parallel_work(), GRAIN) + 1]

OPS = {
    "gelu": (lambda g, x: F.gelu(x), False),
    "gelu_tanh": (lambda g, x: F.gelu(x, approximate="tanh"), False),
    "silu": (lambda g, x: F.silu(x), False),
    "sigmoid": (lambda g, x: torch.sigmoid(x), False),
    "gelu_backward": (lambda g, x: A.gelu_backward(g, x), True),
    "gelu_tanh_backward": (lambda g, x: A.gelu_backward(g, x, approximate="tanh"), True),
    "sigmoid_backward": (lambda g, y: A.sigmoid_backward(g, y), True),
    "tanh_backward": (lambda g, y: A.tanh_backward(g, y), True),
    "pow2": (lambda g, x: x.pow(2), False),
    "square": (lambda g, x: torch.square(x), False),
    "relu": (lambda g, x: torch.relu(x), False),
    "log": (lambda g, x: torch.log(x), False),
    "elu_backward": (lambda g, x: A.elu_backward(g, 1.0, 1.0, 1.0, False, x), True),
    "elu_backward_numbers": (lambda g, x: A.elu_backward(g, 0.5, 1.0507, 1.5, False, x), True),
    "elu_result_backward": (lambda g, y: A.elu_backward(g, 1.0, 1.0, 1.0, True, y), True),
    "softplus_backward": (lambda g, x: A.softplus_backward(g, x, 1.0, 20.0), True),
    "softplus_backward_numbers": (lambda g, x: A.softplus_backward(g, x, 2.0, 5.0), True),
    "glu": (lambda g, x: F.glu(torch.cat([g, x]), 0), True),  # (g * sigmoid(x))
    "xlogy": (lambda g, x: torch.xlogy(g, x), True),
    "hypot": (lambda g, x: torch.hypot(g, x), True),
    "atan2": (lambda g, x: torch.atan2(g, x), True),
    "pow": (lambda g, x: torch.pow(g, x), True),  # (g: a positive base, inputs())
}
GELU_OPS = ("gelu", "gelu_tanh", "gelu_backward", "gelu_tanh_backward")


@pytest.fixture(params=low_precision_setting.modes(none=False))
def mode(request):
    for mode, _ in low_precision_setting.setting(request.param):
        yield mode


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
    if op in ("sigmoid_backward", "tanh_backward"):
        x = torch.sigmoid(x) if op == "sigmoid_backward" else torch.tanh(x)  # the forward's result
    if op == "elu_result_backward":
        x = F.elu(x)
    if op in ("log", "xlogy"):
        x = x.abs() * torch.logspace(-6, 3, n)  # positive, over nine decades (negatives: the specials' test)
    grad = torch.randn(n, generator=g)
    if op == "pow":
        grad = grad.abs() + 0.01  # (negative bases: the specials' and patterns' tests)
    return grad.to(dtype), x.to(dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_activation_matches_cpu(op, dtype, n, mode):
    # the fused kernel: CPU's numerics (float32 math, one rounding to the
    # dtype) within the dtype's tolerances, and close to CPU's own kernel of
    # the dtype (which may round twice: fp16 sigmoid_backward); the native
    # path: CPU's kernel of the dtype (not bit for bit: mtia runs it on one
    # thread below 1M elements, CPU on two, and ATen's vector and scalar-tail
    # loops differ in the last bit where the ranges split). The first call of
    # a signature and a later one.
    f, _ = OPS[op]
    for seed in (0, 1):
        g, x = inputs(op, n, dtype, seed)
        mtia = fused_calls(mode, lambda: f(g.to("mtia"), x.to("mtia")))
        assert mtia.device.type == "mtia" and mtia.dtype == dtype and mtia.shape == x.shape
        if mode == "native":
            torch.testing.assert_close(mtia.cpu(), f(g, x))
            continue
        torch.testing.assert_close(mtia.cpu(), f(g.float(), x.float()).to(dtype))
        torch.testing.assert_close(mtia.cpu(), f(g, x), atol=1e-5, rtol=2e-3 if dtype == torch.float16 else 1.6e-2)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_nan_inf_and_extremes_as_on_cpu(op, dtype, mode):
    f, _ = OPS[op]
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 12.0, -12.0, 30.0, -30.0, 1e-3, -1e-3,
               6e4, -6e4, 5.0, -5.0, 0.5]
    x = torch.tensor(special * 2049 + special[:7])  # 32791: the 32- and 16-element blocks and the tail
    g = torch.linspace(-2, 2, x.numel())
    if op in ("sigmoid_backward", "tanh_backward"):
        x = torch.sigmoid(x) if op == "sigmoid_backward" else torch.tanh(x)
    if op == "elu_result_backward":
        x = F.elu(x)
    g, x = g.to(dtype), x.to(dtype)
    # (gelu: ATen's formula, in float64, rounded: CPU's own kernels differ by
    # host at +inf (oneDNN's float32 and bf16 gelu give NaN, and so does its
    # fp16 gelu where the host has avx512_fp16), the formula and CUDA give inf;
    # the others: float32, rounded)
    wide = torch.float64 if op in GELU_OPS else torch.float32
    expected = f(g.to(wide), x.to(wide)).to(dtype).float()
    if op.startswith("elu") and mode != "native":  # (CPU's vector loop gives NaN for a NaN x, its scalar tail g * scale: the
        # vector loop's answer, from a tensor with no tail)
        pad = lambda t: torch.cat([t, t[: 64 - t.numel() % 64]])
        expected = f(pad(g).float(), pad(x).float())[: x.numel()].to(dtype).float()
    mtia = fused_calls(mode, lambda: f(g.to("mtia"), x.to("mtia"))).cpu().float()
    if op in GELU_OPS and mode == "native":
        expected = f(g, x).float()  # CPU's own kernel in the dtype, which this mode runs
    assert torch.equal(mtia.isnan(), expected.isnan()), (mtia, expected)
    assert torch.equal(mtia.isinf(), expected.isinf()), (mtia, expected)
    torch.testing.assert_close(mtia, expected, equal_nan=True, atol=1e-5, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_in_place_forms(dtype, mode):
    for op, ref in ((A.gelu_, F.gelu), (A.silu_, F.silu), (A.sigmoid_, torch.sigmoid), (A.relu_, torch.relu)):
        x = (torch.randn(GRAIN + 1001) * 3).to(dtype)
        m = x.to("mtia")
        ptr, version = m.data_ptr(), m._version
        r = fused_calls(mode, lambda: op(m))
        assert r is m and m.data_ptr() == ptr and m._version == version + 1
        torch.testing.assert_close(m.cpu(), ref(x.float()).to(dtype) if mode == "float32" else ref(x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_other_layouts_take_cpus_kernel(dtype, mode):
    # non-contiguous operands, mixed dtypes, float32: the boxed
    # fallback (CPU's kernel), with CPU's results
    x = (torch.randn(400, 300) * 3).to(dtype)
    cases = [
        (lambda t: F.gelu(t.t()), x),
        (lambda t: torch.sigmoid(t[:, ::2]), x),
        (lambda t: A.gelu_backward(torch.ones(300, 400, dtype=dtype, device=t.device).t(), t), x),
        (lambda t: F.silu(t), x.float()),
    ]
    for f, t in cases:
        mtia = fused_calls(mode, lambda: f(t.to("mtia")), expect=False)
        torch.testing.assert_close(mtia.cpu(), f(t))
    g = torch.randn(400, 300, dtype=torch.float32)
    mtia = fused_calls(mode, lambda: A.gelu_backward(g.to("mtia"), x.to("mtia")), expect=False)
    torch.testing.assert_close(mtia.cpu(), A.gelu_backward(g, x))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_argument_errors_raise_at_the_call_as_on_cpu(dtype, mode):
    x = torch.randn(GRAIN + 20).to(dtype)
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
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        A.gelu_backward(torch.ones_like(x), x.to("mtia"))  # a CPU gradient
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        A.sigmoid_backward(torch.ones_like(x, device="mtia"), x)
    torch.testing.assert_close(F.gelu(x.to("mtia")).cpu(), F.gelu(x.float()).to(dtype) if mode == "float32"
                               else F.gelu(x))  # the device stays usable


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_training_through_activations_under_autocast(dtype, mode):
    # an MLP with GELU, SiLU and a sigmoid gate: forward and backward under
    # autocast (the activations run in the dtype), gradients close to CPU's
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128), torch.nn.SiLU(),
                              torch.nn.Linear(128, 96), torch.nn.Sigmoid())
    x = torch.randn(512, 64)  # activations of 49152-65536 elements: the fused kernel's
    n = C._fused_activation_calls()
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
    took = C._fused_activation_calls() - n  # gelu, silu, sigmoid and the backward of gelu and sigmoid (and silu's)
    assert took >= 6 if mode == "float32" else took == 0, took
    for a, b in zip(grads["mtia"], grads["cpu"]):
        torch.testing.assert_close(a.cpu(), b, rtol=3e-2, atol=3e-2)


def test_the_path_and_isa_follow_the_mode_the_host_and_atens_capability():
    flags = open("/proc/cpuinfo").read().split()
    code = ("import torch, openmtia; C = openmtia._C; "
            "print(*[C._activation_path(d, o) for d in (torch.bfloat16, torch.float16, torch.float32) "
            "for o in (True, False)], C._activation_isa())")
    env = dict(os.environ, OPENMTIA_LOW_PRECISION="auto", ATEN_CPU_CAPABILITY="avx2")
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()
    f, n = "float32", "native"
    assert run() == [f, f, f, f, n, n, "avx2"]  # like a host without AVX-512: the 8-lane kernel for all
    env["OPENMTIA_LOW_PRECISION"] = "native"
    assert run() == [n, n, n, n, n, n, "avx2"]
    env["OPENMTIA_LOW_PRECISION"] = "float32"
    env.pop("ATEN_CPU_CAPABILITY")
    isa = "avx512" if low_precision_setting.HOST_AVX512 and torch.backends.cpu.get_cpu_capability().startswith("AVX512") else "avx2"
    assert run() == [f, f, f, f, n, n, isa]
    # auto: CPU's oneDNN gelu where the dtype is native here, the fused kernel else
    env["OPENMTIA_LOW_PRECISION"] = "auto"
    avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    bf16 = n if avx512 and ("avx512_bf16" in flags or "amx_bf16" in flags) else f
    fp16 = n if avx512 and ("avx512_fp16" in flags or "amx_fp16" in flags) else f
    assert run() == [bf16, f, fp16, f, n, n, isa]


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_host_without_the_instructions_keeps_cpus_kernels(dtype):
    # isa "none": what a host without AVX2/FMA/F16C runs, even in mode float32
    before, before_isa = C._low_precision_mode(), C._activation_isa()
    try:
        C._set_low_precision_mode("float32")
        C._set_activation_isa("none")
        x = (torch.randn(GRAIN + 1000) * 3).to(dtype)
        mtia = fused_calls("native", lambda: F.gelu(x.to("mtia")))
        torch.testing.assert_close(mtia.cpu(), F.gelu(x))
        if not low_precision_setting.HOST_AVX512:
            with pytest.raises(RuntimeError, match="this host cannot run the AVX-512 activation kernel"):
                C._set_activation_isa("avx512")
    finally:
        C._set_activation_isa(before_isa)
        C._set_low_precision_mode(before)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_relu_keeps_cpus_bits(dtype, mode):
    # relu is CPU's clamp_min(x, 0): negatives become +0, -0 stays -0, NaN
    # stays NaN; every other value is the input's, bit for bit
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, -1e-40, 3.0, -3.0,
               torch.finfo(dtype).max, -torch.finfo(dtype).max, torch.finfo(dtype).tiny, -torch.finfo(dtype).tiny]
    x = torch.tensor(special * 2600 + special[:5]).to(dtype)  # 33805 elements: the blocks and a tail
    for f in (torch.relu, lambda t: t.clone().relu_(), F.relu):
        mtia = fused_calls(mode, lambda: f(x.to("mtia"))).cpu()
        cpu = f(x)
        assert torch.equal(mtia.isnan(), cpu.isnan())
        keep = ~cpu.isnan()
        assert torch.equal(mtia[keep].view(torch.int16), cpu[keep].view(torch.int16))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_log_of_subnormals_and_in_place(dtype, mode):
    """log's loop scales subnormal inputs (bf16's are float32 subnormals);
    log_ writes self."""
    tiny = torch.finfo(dtype).tiny
    x = torch.cat([torch.tensor([tiny / 2, tiny / 8, tiny / 64, tiny, tiny * 3]), torch.rand(GRAIN) + 0.5])
    x = x.to(dtype)
    assert x[:3].ne(0).all() and (x[:3] < tiny).all()  # subnormal in the dtype
    got = fused_calls(mode, lambda: torch.log(x.to("mtia"))).cpu()
    torch.testing.assert_close(got, x.float().log().to(dtype) if mode == "float32" else x.log())
    m = x.to("mtia")
    r = fused_calls(mode, lambda: m.log_())
    assert r is m
    torch.testing.assert_close(m.cpu(), got)


# Piecewise activations, their backward, reciprocal, the roundings, frac,
# sign, maximum, minimum, nan_to_num and the shrinks: CPU's formulas in float32, so CPU's bits; relu6/hardtanh are CPU's
# clamp (the clamp loop), isnan CPU's x != x (the comparison loop).
def loop_calls():
    return C._fused_activation_calls() + C._fused_arithmetic_calls() + C._fused_comparison_calls()


EXACT = {
    "reciprocal": lambda g, x: torch.reciprocal(x),
    "hardswish": lambda g, x: F.hardswish(x),
    "hardsigmoid": lambda g, x: F.hardsigmoid(x),
    "leaky_relu": lambda g, x: F.leaky_relu(x),
    "leaky_relu negative slope": lambda g, x: F.leaky_relu(x, -0.3),
    "relu6": lambda g, x: F.relu6(x),
    "hardtanh": lambda g, x: F.hardtanh(x, -0.7, 0.33),
    "hardswish_backward": lambda g, x: A.hardswish_backward(g, x),
    "hardsigmoid_backward": lambda g, x: A.hardsigmoid_backward(g, x),
    "leaky_relu_backward": lambda g, x: A.leaky_relu_backward(g, x, 0.1, False),
    "leaky_relu_backward of the result": lambda g, x: A.leaky_relu_backward(g, x, 0.2, True),
    "threshold_backward": lambda g, x: A.threshold_backward(g, x, 0),
    "threshold_backward 0.1": lambda g, x: A.threshold_backward(g, x, 0.1),  # (0.1 in float32, as CPU's)
    "hardtanh_backward": lambda g, x: A.hardtanh_backward(g, x, -0.7, 0.33),
    "isnan": lambda g, x: torch.isnan(x),
    "reciprocal_": lambda g, x: x.clone().reciprocal_(),
    "hardswish_": lambda g, x: F.hardswish(x.clone(), inplace=True),
    "hardsigmoid_": lambda g, x: F.hardsigmoid(x.clone(), inplace=True),
    "leaky_relu_": lambda g, x: F.leaky_relu(x.clone(), 0.05, inplace=True),
    "relu6_": lambda g, x: F.relu6(x.clone(), inplace=True),
    "floor": lambda g, x: torch.floor(x),
    "ceil": lambda g, x: torch.ceil(x),
    "round": lambda g, x: torch.round(x),  # (half to even)
    "trunc": lambda g, x: torch.trunc(x),
    "frac": lambda g, x: torch.frac(x),
    "sign": lambda g, x: torch.sign(x),
    "maximum": lambda g, x: torch.maximum(x, g),
    "minimum": lambda g, x: torch.minimum(g, x),
    "maximum of zeros": lambda g, x: torch.maximum(x, -torch.zeros_like(x)),  # (+-0 pairs: CPU's vmaxps picks)
    "minimum of zeros": lambda g, x: torch.minimum(torch.zeros_like(x), x),
    "nan_to_num": lambda g, x: torch.nan_to_num(x),
    "nan_to_num numbers": lambda g, x: torch.nan_to_num(x, nan=0.3, posinf=1e10, neginf=-7.1),
    "nan_to_num_": lambda g, x: x.clone().nan_to_num_(nan=-1.5),
    "hardshrink": lambda g, x: F.hardshrink(x),
    "hardshrink 0.3": lambda g, x: F.hardshrink(x, 0.3),  # (0.3: not a bf16/fp16 value)
    "softshrink": lambda g, x: F.softshrink(x),
    "softshrink 0.3": lambda g, x: F.softshrink(x, 0.3),
    "softshrink_backward": lambda g, x: A.softshrink_backward(g, x, 0.3),
    "hardshrink_backward": lambda g, x: A.hardshrink_backward(g, x, 0.3),
    "floor_": lambda g, x: x.clone().floor_(),
    "round_": lambda g, x: x.clone().round_(),
}


def same_bits(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == torch.bool:
        assert torch.equal(got, want)
        return
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


@pytest.mark.parametrize("n", [GRAIN + 1, GRAIN + 33, max(C._parallel_work(), GRAIN) + 1])
@pytest.mark.parametrize("op", EXACT)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_piecewise_activations_give_cpus_bits(op, dtype, n, mode):
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3.0, -3.0, 2.99, -2.99, 6.0, 0.33, -0.7,
               0.1, 1e-3, -1e-3, torch.finfo(dtype).max, -torch.finfo(dtype).max, torch.finfo(dtype).tiny,
               0.5, -0.5, 1.5, -2.5, 2.5, 1000.5 if dtype == torch.float16 else 100.5, -7.75]
    if op == "hardswish_backward":
        special = [v for v in special if v == v]  # (of NaN CPU's vector loop gives NaN, its scalar tail the gradient)
    f = EXACT[op]
    for seed in (0, 1):  # (the signature's first call, then a later one)
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=gen) * 4
        x[: len(special) * 16] = torch.tensor(special).repeat(16)
        g = torch.randn(n, generator=gen)
        g[::7] = float("nan")
        g, x = g.to(dtype), x.to(dtype)
        before = loop_calls()
        got = f(g.to("mtia"), x.to("mtia"))
        torch.mtia.synchronize()
        assert (loop_calls() > before) == (mode == "float32")
        want = f(g, x)
        if op.startswith("softshrink ") or op == "softshrink":  # (CPU's vector loop gives +0 between the
            got, want = got.cpu() + 0, want + 0                  # bounds, its scalar tail -0 for negatives)
        same_bits(got, want)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_piecewise_activations_raise_cpus_errors_and_train(dtype, mode):
    x = torch.randn(GRAIN + 5).to(dtype)
    with pytest.raises(RuntimeError, match="In-place leakyReLu backward calculation is triggered with a negative slope"):
        A.leaky_relu_backward(x.to("mtia"), x.to("mtia"), -0.1, True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        A.hardswish_backward(x, x.to("mtia"))
    for lambd in (-1.0, float("inf"), float("nan"), 1e39 if dtype == torch.bfloat16 else 65519.0):
        # (the softshrink loop takes lambd in [0, the dtype's largest])
        with pytest.raises(RuntimeError, match="lambda must be in range"):
            F.softshrink(x.to("mtia"), lambd)
    big = 1e39 if dtype == torch.bfloat16 else 65519.0  # (beyond the dtype's largest: CPU's kernels raise)
    for f in (lambda t: F.hardshrink(t, big), lambda t: A.hardshrink_backward(t, t, big),
              lambda t: A.softshrink_backward(t, t, big)):
        with pytest.raises(RuntimeError, match="value cannot be converted to type c10::.* without overflow"):
            f(x.to("mtia"))
    # autograd through each of them (their backward kernels), against CPU
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(GRAIN + 77, generator=gen) * 4).to(dtype)
    g = torch.randn(GRAIN + 77, generator=gen).to(dtype)
    for act in (F.hardswish, F.hardsigmoid, F.leaky_relu, F.relu6, torch.relu):
        results = []
        for device in ("cpu", "mtia"):
            xd = x.to(device).detach().clone().requires_grad_()
            y = act(xd)
            y.backward(g.to(device))
            results.append((y.detach(), xd.grad))
        for got, want in zip(results[1], results[0]):
            same_bits(got, want)


@pytest.mark.parametrize("op", EXACT)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_every_bit_pattern_gives_cpus_bits(op, dtype, mode):
    """x takes each of the dtype's 65,536 bit patterns once (a multiple of
    CPU's vector blocks: its vector loop's results), so that a loop's
    shortcut (reciprocal's Newton steps, hardswish_backward's division by 3,
    the 16-bit sign and nan_to_num) is checked wherever it could differ."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    g = torch.randn(x.numel(), generator=torch.Generator().manual_seed(3)).to(dtype)
    f = EXACT[op]
    for _ in range(2):  # (the signature's first call, then a later one)
        before = loop_calls()
        got = f(g.to("mtia"), x.to("mtia"))
        torch.mtia.synchronize()
        assert (loop_calls() > before) == (mode == "float32")
        same_bits(got, f(g, x))


@pytest.mark.parametrize("shape,dim", [((64, 1030), -1), ((64, 2, 300), 1), ((2 * GRAIN + 6,), 0), ((6, 3, 8, 700), 2),
                                       ((3, 2 * GRAIN + 2), 1), ((4, 10, 2000), 0)], ids=str)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_glu_over_each_dim_matches_cpu(shape, dim, dtype, mode):
    # a * sigmoid(b), the halves along dim: runs of the rows before dim
    g = torch.Generator().manual_seed(len(shape))
    x = (torch.randn(shape, generator=g) * 4).to(dtype)
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    for _ in range(2):  # (the signature's first call, then a later one)
        got = fused_calls(mode, lambda: F.glu(x.to("mtia"), dim)).cpu()
        if mode == "native":
            torch.testing.assert_close(got, F.glu(x, dim), equal_nan=True)
            continue
        torch.testing.assert_close(got, F.glu(x.float(), dim).to(dtype), equal_nan=True)
        torch.testing.assert_close(got, F.glu(x, dim), equal_nan=True, atol=1e-5,
                                   rtol=2e-3 if dtype == torch.float16 else 1.6e-2)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_glu_errors_other_calls_and_gradients_as_on_cpu(dtype, mode):
    x = (torch.randn(64, 1031) * 2).to(dtype)
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is size 1031"):
        F.glu(x.to("mtia"), 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.glu(x.to("mtia"), 2)
    y = x[:, :1030]
    for f in (lambda t: F.glu(t.t(), 0),  # not contiguous: CPU's kernel
              lambda t: F.glu(t[:4, :8], 1)):  # small: CPU's kernel
        got = fused_calls(mode, lambda: f(y.to("mtia")), expect=False)
        torch.testing.assert_close(got.cpu(), f(y))
    grads = []
    for device in ("cpu", "mtia"):
        t = y.to(device).detach().requires_grad_()
        F.glu(t, -1).float().pow(2).sum().backward()
        grads.append(t.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], atol=1e-2, rtol=2e-2)


PATTERN_PAIRS = {name: OPS[name][0] for name in ("atan2", "hypot", "xlogy", "pow")}
PATTERN_PAIRS["pow of every exponent"] = lambda g, x: torch.pow(x, g)


@pytest.mark.parametrize("op", PATTERN_PAIRS)
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_binary_functions_of_every_pattern_pair_class(op, dtype, mode):
    # y takes every bit pattern of the dtype against x from a list of
    # specials and ordinary values (signed zeros, infinities, NaN,
    # subnormals, the largest): CPU's zeros, infinities and NaNs exactly,
    # the rest within the dtype's tolerances of the float32 formula
    f = PATTERN_PAIRS[op]
    y = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    info = torch.finfo(dtype)
    for v in (0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, info.max, -info.max, info.tiny,
              info.tiny / 4, 2.5, -7.0):
        x = torch.full_like(y, v)
        got = fused_calls(mode, lambda: f(y.to("mtia"), x.to("mtia"))).cpu()
        want = f(y.float(), x.float()).to(dtype) if mode != "native" else f(y, x)
        assert torch.equal(got.isnan(), want.isnan()), v
        exact = want.isinf() | (want == 0)
        assert torch.equal(got[exact].view(torch.int16), want[exact].view(torch.int16)), v
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=2e-3 if dtype == torch.float16 else 1.6e-2)
