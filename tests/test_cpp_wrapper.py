"""torch.compile on mtia with Inductor's C++ wrapper (cpp_wrapper=True, issue
41 point 1): the generated C++ host code runs the C++ kernels as tasks on the
current mtia stream and the ops Inductor does not compile through mtia's C
shim (the dispatcher), as the Python wrapper does.

Results are compared with CPU eager.
"""
import pytest
import torch
import torch._dynamo
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
from torch.profiler import ProfilerActivity, profile

import openmtia


@pytest.fixture(autouse=True)
def _cpp_wrapper():
    torch._dynamo.reset()
    with config.patch(cpp_wrapper=True):
        yield
    torch._dynamo.reset()


def test_mtia_registers_its_cpp_wrapper():
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    from openmtia.inductor.cpp_wrapper import MtiaCppWrapper

    common.init_backend_registration()
    assert common.get_wrapper_codegen_for_device("mtia", cpp_wrapper=True) is MtiaCppWrapper
    assert issubclass(MtiaCppWrapper, CppWrapperCpu)


def test_generated_cpp_allocates_on_the_device_launches_kernels_and_calls_the_mtia_shim():
    a = torch.randn(32, 32, device="mtia:1")
    out, (code,) = run_and_get_code(torch.compile(lambda a: (a @ a).relu() * 2 + 1), a)
    assert out.device == torch.device("mtia:1")
    torch.testing.assert_close(out.cpu(), (a.cpu() @ a.cpu()).relu() * 2 + 1)
    assert "cached_torch_device_type_mtia, 1, &buf0_handle" in code  # the caching allocator, on mtia:1
    assert "aoti_torch_mtia_mm_out(" in code  # the eager mtia kernel, through the dispatcher
    assert "aoti_torch_cpu_" not in code  # never the CPU's shims (at::cpu::, no streams)
    assert 'openmtia_aoti_launch_kernel(mtia_device, "cpp_fused_' in code
    assert "#include <openmtia/aoti_mtia.h>" in code


# ------------------------------------------------------------ device work
# (asynchronous calls, ordering with eager ops, the current stream, CPU
# scalars read at launch: test_compile.py runs them with both wrappers)
def test_kernels_are_device_kernels_in_the_profiler():
    f = torch.compile(lambda a: (a @ a).relu() * 2 + 1)
    a = torch.randn(32, 32, device="mtia")
    f(a)
    torch.mtia.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as prof:
        f(a)
        torch.mtia.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.MTIA}
    assert "mtia:aten::mm" in names and any(n.startswith("mtia:cpp_fused_") for n in names), names


def test_compiled_code_is_captured_into_an_mtia_graph():
    f = torch.compile(lambda a: (a @ a).relu() * 2 + 1)
    a = torch.randn(32, 32, device="mtia")
    f(a)
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.stream(torch.mtia.Stream()), torch.mtia.graph(g):
        out = f(a)
    for value in (1.0, -2.0):
        a.fill_(value)
        g.replay()
        torch.testing.assert_close(out.cpu(), (torch.full((32, 32), value) @ torch.full((32, 32), value)).relu() * 2 + 1)


# ------------------------------------------------------------- results
# (the transformer block's training: test_compile.py, with both wrappers)


def test_ops_inductor_does_not_compile_run_through_the_mtia_shim():
    x = torch.randn(10, 7)
    f = lambda x: torch.sort(x * 2, dim=-1)[0] + torch.linalg.inv(torch.eye(7, device=x.device) + x[:7].T @ x[:7]).sum()
    out, (code,) = run_and_get_code(torch.compile(f), x.to("mtia"))
    assert "aoti_torch_mtia_sort" in code
    torch.testing.assert_close(out.cpu(), f(x), atol=1e-4, rtol=1e-4)


def test_bfloat16_matches_eager():
    torch.manual_seed(0)
    x, w = torch.randn(16, 32, dtype=torch.bfloat16), torch.randn(32, 32, dtype=torch.bfloat16)
    f = lambda x, w: torch.nn.functional.gelu(x @ w) * 0.5 + x.sum(-1, keepdim=True)
    out = torch.compile(f)(x.to("mtia"), w.to("mtia"))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), f(x, w), atol=0.1, rtol=0.02)  # compiled keeps float32 in a fusion


# ----------------------------------------------------------- MTIA's rules
# (native_layer_norm kept whole, forward and backward, and the fusion limit:
# test_compile.py, with both wrappers)
