"""The Triton path (OPENMTIA_INDUCTOR_BACKEND=triton, issue 10 section 3):
Inductor's Triton scheduling for mtia, kernels run by Triton's interpreter over
the device memory. The backend is chosen per process: each check runs in a
subprocess. Triton is a test dependency (scripts/setup.sh installs it).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import json
import torch
import torch._dynamo
from torch._inductor import config, metrics
from torch._inductor.utils import run_and_get_code
results = {}
"""


def run_triton_path(body):
    env = dict(os.environ, OPENMTIA_INDUCTOR_BACKEND="triton")
    env.pop("TRITON_INTERPRET", None)  # openmtia sets it
    script = PRELUDE + textwrap.dedent(body) + "\nprint('RESULTS', json.dumps(results))\n"
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    line = next(l for l in r.stdout.splitlines() if l.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def test_triton_is_installed():
    import triton  # noqa: F401  (a missing test dependency fails here, clearly)


@pytest.fixture(scope="module")
def triton_results():
    return run_triton_path("""
        import os, openmtia.inductor
        from torch._inductor.codegen import common
        common.init_backend_registration()
        from torch._inductor.codegen.triton import TritonScheduling
        results["backend"] = openmtia.inductor.backend()
        results["interpret"] = os.environ.get("TRITON_INTERPRET")
        results["scheduling_is_triton"] = common.get_scheduling_for_device("mtia") is TritonScheduling

        # a function: Triton kernels, the same values as CPU
        a, b = torch.randn(32, 32, device="mtia"), torch.randn(32, 32, device="mtia")
        out, (code,) = run_and_get_code(torch.compile(lambda a, b: torch.relu(a @ b) * 2 + 1), a, b)
        results["fn_err"] = (out.cpu() - (torch.relu(a.cpu() @ b.cpu()) * 2 + 1)).abs().max().item()
        results["fn_triton_kernels"] = code.count("async_compile.triton(")
        results["fn_allocates_on_mtia"] = "empty_strided_mtia((32, 32), (32, 1), torch.float32, 0)" in code

        # ordered with the stream: an eager op queued before a compiled kernel
        x = torch.zeros(4096, device="mtia")
        g = torch.compile(lambda x: x * 2)
        g(x)
        for _ in range(20):
            x.add_(1)
        results["ordered"] = g(x).cpu().eq(40).all().item()

        # combo kernels and combo_kernel_max_num_args
        def many(*xs):
            return [x.sin() + i for i, x in enumerate(xs)]
        xs = [torch.randn(32 + i, device="mtia") for i in range(8)]
        counts = {}
        for name, patch in (("none", {"combo_kernels": False}), ("combo", {"combo_kernels": True}),
                            ("combo_max4", {"combo_kernels": True, "combo_kernel_max_num_args": 4})):
            torch._dynamo.reset()
            metrics.reset()
            with config.patch({**patch, "fx_graph_cache": False}):
                outs = torch.compile(many)(*xs)
            counts[name] = metrics.generated_kernel_count
            results["combo_err_" + name] = max((o.cpu() - (x.cpu().sin() + i)).abs().max().item()
                                               for i, (o, x) in enumerate(zip(outs, xs)))
        results["combo_counts"] = counts

        # the fusion guardrail on the Triton path
        def eleven(x0, *xs):
            return [torch.relu(x0 * xi + 1) for xi in xs]
        args = [torch.randn(64, device="mtia") for _ in range(12)]
        guard = {}
        for limit in (None, 4):
            torch._dynamo.reset()
            metrics.reset()
            with config.patch(max_fusion_unique_io_buffers=limit, fx_graph_cache=False):
                torch.compile(eleven)(*args)
            guard[str(limit)] = metrics.generated_kernel_count
        results["guardrail"] = guard

        # a training step: forward and backward kernels
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1))
        import copy
        mt = copy.deepcopy(m).to("mtia")
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        lt = torch.nn.functional.mse_loss(torch.compile(mt)(x.to("mtia")), y.to("mtia"))
        lt.backward()
        results["train_loss_err"] = abs(loss.item() - lt.item())
        results["train_grad_err"] = max((p.grad - q.grad.cpu()).abs().max().item()
                                        for p, q in zip(m.parameters(), mt.parameters()))

        # a user-written Triton kernel launched on mtia tensors
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

        u, v = torch.randn(1000, device="mtia"), torch.zeros(1000, device="mtia")
        for _ in range(10):
            v.add_(1)  # queued: the kernel must see all ten
        out = torch.empty_like(u)
        add_kernel[(triton.cdiv(1000, 256),)](u, v, out, 1000, BLOCK=256)
        results["user_kernel_err"] = (out.cpu() - (u.cpu() + 10)).abs().max().item()
        results["user_kernel_device"] = str(out.device)

        # deployment: cpp_wrapper and AOTInductor raise at compile time, naming the C++ path
        for name, build in [
                ("cpp_wrapper", lambda: torch.compile(lambda a: a.relu() + 1, options={"cpp_wrapper": True})(a)),
                ("aoti", lambda: torch._inductor.aoti_compile_and_package(
                    torch.export.export(torch.nn.Linear(32, 4).to("mtia"), (a,))))]:
            try:
                build()
                results[name + "_error"] = None
            except Exception as e:
                results[name + "_error"] = type(e).__name__ + ": " + str(e)
        results["after_errors_err"] = (torch.compile(lambda a: a.relu() + 1)(a).cpu() - (a.cpu().relu() + 1)).abs().max().item()
    """)


def test_triton_path_is_registered(triton_results):
    assert triton_results["backend"] == "triton"
    assert triton_results["interpret"] == "1"
    assert triton_results["scheduling_is_triton"]


@pytest.mark.parametrize("kind", ["cpp_wrapper", "aoti"])
def test_deployment_raises_at_compile_time_naming_the_cpp_path(triton_results, kind):
    error = triton_results[kind + "_error"]
    assert error is not None and "OPENMTIA_INDUCTOR_BACKEND=cpp" in error and "AssertionError" not in error, error
    assert "has no C++ wrapper" in error
    assert triton_results["after_errors_err"] < 1e-6  # the Triton path still compiles afterwards


def test_triton_path_compiles_and_matches_cpu(triton_results):
    assert triton_results["fn_triton_kernels"] >= 1
    assert triton_results["fn_allocates_on_mtia"]
    assert triton_results["fn_err"] < 1e-4
    assert triton_results["ordered"]


def test_combo_kernels_and_their_argument_limit(triton_results):
    counts = triton_results["combo_counts"]
    assert counts == {"none": 8, "combo": 1, "combo_max4": 4}  # 4 args: 2 kernels' inputs and outputs each
    for name in counts:
        assert triton_results["combo_err_" + name] < 1e-5


def test_fusion_guardrail_on_the_triton_path(triton_results):
    assert triton_results["guardrail"] == {"None": 1, "4": 11}


def test_training_on_the_triton_path(triton_results):
    assert triton_results["train_loss_err"] < 1e-5
    assert triton_results["train_grad_err"] < 1e-5


def test_user_triton_kernel_on_mtia(triton_results):
    assert triton_results["user_kernel_device"] == "mtia:0"
    assert triton_results["user_kernel_err"] == 0
