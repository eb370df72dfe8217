"""scaled_dot_product_attention on mtia picks its backend as CPU does
(csrc/aten/attention.cpp): CPU's flash kernel where CPU takes it (on mtia through
the fallback; bf16/fp16 over float32 stand-ins on the float32 path,
csrc/aten/low_precision/low_precision.h), math where CPU takes math or sdpa_kernel asks for it.
Against CPU PyTorch, forward and backward."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import openmtia

import low_precision_setting

C = openmtia._C
FLASH = "aten._scaled_dot_product_flash_attention_for_cpu.default"
MATH = "aten._scaled_dot_product_attention_math.default"


class Ops(TorchDispatchMode):
    """The aten ops a call runs (below autograd)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def inputs(dtype, shape=(2, 3, 40, 24), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]


def attention(device, q, k, v, grad, **kw):
    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    with Ops() as ops:
        out = F.scaled_dot_product_attention(q, k, v, **kw)
    out.backward(grad.to(device))
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)], ops.names


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "mask": {"attn_mask": "bool"},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_the_backend_and_results_are_cpus(case, dtype):
    q, k, v = inputs(dtype)
    kw = dict(CASES[case])
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = torch.rand(40, 40, generator=torch.Generator().manual_seed(3)) > 0.3
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    want, cpu_ops = attention("cpu", q, k, v, grad, **kw)
    if "attn_mask" in kw:
        kw["attn_mask"] = kw["attn_mask"].to("mtia")
    got, mtia_ops = attention("mtia", q, k, v, grad, **kw)
    assert (FLASH in mtia_ops) == (FLASH in cpu_ops) and (MATH in mtia_ops) == (MATH in cpu_ops)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_flash_where_cpu_takes_it_and_math_when_asked():
    q, k, v = inputs(torch.float32)
    grad = torch.ones_like(q)
    assert FLASH in attention("mtia", q, k, v, grad)[1]
    with sdpa_kernel(SDPBackend.MATH):
        got, ops = attention("mtia", q, k, v, grad)
        want, _ = attention("cpu", q, k, v, grad)
    assert FLASH not in ops
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # dropout: CPU's flash kernel takes none, math draws the mask on the device
    out = F.scaled_dot_product_attention(*(t.to("mtia") for t in (q, k, v)), dropout_p=0.5)
    assert out.shape == q.shape and bool(out.isfinite().all())


@pytest.fixture(params=low_precision_setting.modes(none=False))
def mode(request):
    for mode, _ in low_precision_setting.setting(request.param):
        yield mode


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_flash_matches_cpu(dtype, causal, mode):
    # the float32 path: the flash kernel and its backward over float32
    # stand-ins, each result rounded once (logsumexp stays float32)
    q, k, v = inputs(dtype, shape=(2, 4, 64, 32))
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    want, _ = attention("cpu", q, k, v, grad, is_causal=causal)
    exact, _ = attention("cpu", q.double(), k.double(), v.double(), grad.double(), is_causal=causal)
    n = C._low_precision_float32_calls()
    got, ops = attention("mtia", q, k, v, grad, is_causal=causal)
    assert FLASH in ops
    assert C._low_precision_float32_calls() - n == (2 if mode == "float32" else 0)  # forward and backward
    for g, w, e in zip(got, want, exact):
        assert g.dtype == dtype
        # as close to float64 as CPU's, give or take a rounding of the dtype
        err, cpu_err = (g.double() - e).abs().max(), (w.double() - e).abs().max()
        assert err <= cpu_err + 2 * torch.finfo(dtype).eps * e.abs().max(), (err, cpu_err)
    lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*(t.to("mtia") for t in (q, k, v)))[1]
    assert lse.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_auto_takes_the_float32_path_on_every_host(dtype):
    # CPU's own bf16 flash backward, even on a host with native bf16, took
    # 6.6 ms for the main job's attention against 0.58 on the float32 path
    q, k, v = inputs(dtype, shape=(8, 4, 12, 32))
    for _ in low_precision_setting.setting("auto"):
        n = C._low_precision_float32_calls()
        attention("mtia", q, k, v, torch.ones_like(q), is_causal=True)
        assert C._low_precision_float32_calls() - n == 2
