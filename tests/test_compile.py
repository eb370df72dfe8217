"""torch.compile on mtia (issue 10): Inductor's C++ kernels as device work,
training, dynamic shapes, guards, reduce-overhead, and MTIA's Inductor rules.

Graphs are small (compile time is CI time); the Inductor cache stays warm
within the run.
"""
import copy

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch._inductor import config, metrics
from torch._inductor.utils import run_and_get_code

import openmtia
import openmtia.inductor
import openmtia.inductor.graphs as mtia_graphs
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(params=[False, True], ids=["python_wrapper", "cpp_wrapper"])
def wrapper(request):
    """Both host-code generators: Inductor's Python wrapper and its C++ one
    (cpp_wrapper=True, openmtia/inductor/cpp_wrapper.py)."""
    with config.patch(cpp_wrapper=request.param):
        yield request.param


def gate(device=0, timeout_s=30.0):
    """Holds the current stream of `device` until released."""
    return openmtia._C_test.launch_blocking_task(device, timeout_s)


def mtia_like(module):
    return copy.deepcopy(module).to("mtia")


def max_param_diff(a, b):
    return max((p.detach() - q.detach().cpu()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


# ------------------------------------------------------------- registration
def test_mtia_is_registered_with_the_cpp_backend():
    from torch._inductor.codegen import common
    from torch._inductor.utils import GPU_TYPES

    common.init_backend_registration()
    from openmtia.inductor.cpp import MtiaCppScheduling, MtiaWrapperCodegen

    assert openmtia.inductor.backend() == "cpp"
    assert common.get_scheduling_for_device("mtia") is MtiaCppScheduling
    assert common.get_wrapper_codegen_for_device("mtia") is MtiaWrapperCodegen
    assert "mtia" not in GPU_TYPES  # Inductor's CPU-style decisions for mtia's C++ kernels


def test_generated_code_allocates_on_the_device_and_launches_kernels():
    a = torch.randn(32, 32, device="mtia:1")
    out, (code,) = run_and_get_code(torch.compile(lambda a: (a @ a).relu() * 2 + 1), a)
    assert out.device == torch.device("mtia:1")
    torch.testing.assert_close(out.cpu(), (a.cpu() @ a.cpu()).relu() * 2 + 1)
    assert "empty_strided_mtia((32, 32), (32, 1), torch.float32, 1)" in code
    assert "openmtia_cpp_kernel(async_compile, 'cpp_fused" in code
    assert "extern_kernels.mm(" in code  # the eager mtia kernel
    assert ".cpu()" not in code and "device='cpu'" not in code  # nothing staged through the host


def test_bad_backend_name_is_rejected(monkeypatch):
    monkeypatch.setenv("OPENMTIA_INDUCTOR_BACKEND", "cuda")
    with pytest.raises(ValueError, match="OPENMTIA_INDUCTOR_BACKEND"):
        openmtia.inductor.backend()


# ------------------------------------------------------------ device work
@pytest.mark.needs_async
def test_compiled_call_returns_before_its_kernels_run(wrapper):
    f = torch.compile(lambda a, b: torch.relu(a @ b) * 2 + 1)
    a, b = torch.randn(64, 64, device="mtia"), torch.randn(64, 64, device="mtia")
    f(a, b)  # compile
    g = gate()
    try:
        out = f(a, b)  # returns while the stream is held: every kernel is queued behind the gate
        assert not torch.mtia.current_stream().query()
    finally:
        g.release()
    torch.testing.assert_close(out.cpu(), torch.relu(a.cpu() @ b.cpu()) * 2 + 1)


@pytest.mark.needs_async
def test_compiled_kernels_are_ordered_with_eager_ops(wrapper):
    f = torch.compile(lambda x: x.sin() * 3 + x)
    x = torch.zeros(1000, device="mtia")
    f(x)
    x.add_(1).mul_(0)  # the eager signatures' first calls (synchronous)
    torch.mtia.synchronize()
    g = gate()
    try:
        x.add_(1)  # eager, queued
        y = f(x)  # compiled: must read x + 1
        x.mul_(0)  # eager: must come after the compiled kernel read x
        assert not torch.mtia.current_stream().query()
    finally:
        g.release()
    torch.testing.assert_close(y.cpu(), torch.ones(1000).sin() * 3 + 1)
    assert x.cpu().eq(0).all()


@pytest.mark.needs_async
def test_compiled_kernels_run_on_the_current_stream(wrapper):
    f = torch.compile(lambda x: x * 2)
    x = torch.ones(100, device="mtia")
    f(x)
    s = torch.mtia.Stream()
    g = gate()  # holds the default stream only
    try:
        with torch.mtia.stream(s):
            y = f(x)
            s.synchronize()  # the side stream is free: the kernel ran there
        assert not torch.mtia.default_stream().query()
    finally:
        g.release()
    assert y.cpu().eq(2).all()


@pytest.mark.needs_async
def test_cpu_scalar_inputs_are_read_at_launch(wrapper):
    f = torch.compile(lambda a, s: a * s + 1)
    a, s = torch.ones(8, device="mtia"), torch.tensor(3.0)
    f(a, s)
    g = gate()
    try:
        out = f(a, s)
        s.fill_(100.0)  # after the launch: the queued kernel keeps 3
    finally:
        g.release()
    assert out.cpu().eq(4).all()


def test_device_mismatch_raises_at_the_call_and_the_device_stays_usable():
    f = torch.compile(lambda a: a.relu() + 1)
    f(torch.randn(4, device="mtia"))
    with pytest.raises(RuntimeError, match="Tensor device mismatch"):
        torch.compile(lambda a, b: a + b)(torch.randn(4, 4, device="mtia"), torch.randn(4, 4))
    assert (f(torch.ones(4, device="mtia")).cpu() == 2).all()


def test_compiled_kernel_rejects_tensors_of_other_devices():
    k = openmtia._C._CompiledKernel(1, "k", "pw")
    with pytest.raises(RuntimeError, match="runs on mtia, but argument 1 is on cpu"):
        k(torch.ones(2, device="mtia"), torch.ones(2))
    with pytest.raises(RuntimeError, match="several devices"):
        k(torch.ones(2, device="mtia:0"), torch.ones(2, device="mtia:1"))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        k(torch.ones(2, device="mtia"))
    with pytest.raises(RuntimeError, match="reads a CPU tensor of 80000 bytes"):
        k(torch.ones(20000), torch.ones(2, device="mtia"))


# ---------------------------------------------------------------- training
class Block(torch.nn.Module):
    """A pre-norm transformer block (attention through SDPA) and a head."""

    def __init__(self, d=32, heads=4, vocab=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.head = torch.nn.Linear(d, vocab)
        self.heads = heads

    def forward(self, idx):
        x = self.emb(idx)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)


def train(model, data, steps, device, compile_model=False, compile_step=False, optimizer=torch.optim.AdamW):
    model = model.to(device)
    opt = optimizer(model.parameters(), lr=1e-2)
    fwd = torch.compile(model) if compile_model else model

    def opt_step():
        opt.step()

    step = torch.compile(opt_step) if compile_step else opt_step
    losses = []
    for x, y in data[:steps]:
        x, y = x.to(device), y.to(device)
        out = fwd(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        step()
        losses.append(loss.item())
    return losses


def test_mlp_trains_three_compiled_steps_like_eager_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4))
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(3)]
    cpu = copy.deepcopy(model)
    ref = train(cpu, data, 3, "cpu")
    mtia = copy.deepcopy(model)
    got = train(mtia, data, 3, "mtia", compile_model=True, compile_step=True)
    assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-4
    assert max_param_diff(cpu, mtia) < 1e-4


def test_transformer_block_trains_three_compiled_steps_like_eager_cpu(wrapper):
    torch.manual_seed(0)
    model = Block()
    data = [(torch.randint(0, 16, (4, 12)), torch.randint(0, 16, (4, 12))) for _ in range(3)]
    # SGD: the key bias's gradient is zero up to rounding (softmax ignores it),
    # which Adam would scale up to lr-sized steps, compiled or not
    cpu = copy.deepcopy(model)
    ref = train(cpu, data, 3, "cpu", optimizer=torch.optim.SGD)
    mtia = copy.deepcopy(model)
    got = train(mtia, data, 3, "mtia", compile_model=True, optimizer=torch.optim.SGD)
    assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-4
    assert max_param_diff(cpu, mtia) < 1e-4


# ------------------------------------------------ dynamo: shapes, breaks, guards
def test_dynamic_shapes_do_not_recompile_after_the_second_batch_size():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(lambda x: torch.relu(x) * x.shape[0], backend=counter, dynamic=True)
    for n in (3, 5, 9, 17, 33):
        x = torch.randn(n, 4, device="mtia")
        torch.testing.assert_close(f(x).cpu(), torch.relu(x.cpu()) * n)
    assert counter.frame_count == 1


def test_automatic_dynamic_recompiles_once():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(lambda x: x.cos() + 1, backend=counter)
    for n in (3, 5, 9, 17):
        x = torch.randn(n, device="mtia")
        torch.testing.assert_close(f(x).cpu(), x.cpu().cos() + 1)
    assert counter.frame_count == 2  # static, then dynamic from the second size on


def test_graph_breaks_run_both_graphs_on_the_device():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def f(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    x = torch.randn(10, device="mtia")
    out = torch.compile(f, backend=counter)(x)
    torch.testing.assert_close(out.cpu(), (x.cpu().sin() * 2).cos() + 1)
    assert counter.frame_count == 2 and out.device.type == "mtia"


def test_guards_recompile_for_another_device_and_dtype():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(lambda x: x * 2 + 1, backend=counter)
    for x in (torch.ones(4, device="mtia:0"), torch.ones(4, device="mtia:1"), torch.ones(4, device="mtia:0",
                                                                                            dtype=torch.float64)):
        out = f(x)
        assert out.device == x.device and out.dtype == x.dtype and out.cpu().eq(3).all()
    assert counter.frame_count == 3
    f(torch.ones(4, device="mtia:1"))  # cached: no new compile
    assert counter.frame_count == 3


def test_compiled_optimizer_step_matches_eager():
    torch.manual_seed(0)
    params = [torch.randn(10, 10, requires_grad=True) for _ in range(3)]
    mparams = [p.detach().to("mtia").requires_grad_() for p in params]
    opt, mopt = torch.optim.AdamW(params, lr=0.1), torch.optim.AdamW(mparams, lr=0.1)
    step = torch.compile(lambda: mopt.step())
    for _ in range(3):
        for p, mp in zip(params, mparams):
            g = torch.randn_like(p)
            p.grad, mp.grad = g, g.to("mtia")
        opt.step()
        step()
    for p, mp in zip(params, mparams):
        torch.testing.assert_close(mp.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------- reduce-overhead
def small_op_model():
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def test_reduce_overhead_replays_graphs_with_correct_results():
    mtia_graphs.reset_stats()
    torch.manual_seed(0)
    model = small_op_model().eval()
    mmodel = mtia_like(model)
    f = torch.compile(mmodel, mode="reduce-overhead")
    outs = []
    with torch.no_grad():
        xs = [torch.randn(4, 32) for _ in range(5)]
        for x in xs:
            outs.append(f(x.to("mtia")))  # results held across calls stay valid
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out.cpu(), model(x), atol=1e-5, rtol=1e-5)
        # warm-up, then one recording replayed at each later call
        assert dict(mtia_graphs.stats) == {"warmups": 1, "recordings": 1, "replays": 4}
        # a new batch size records a new graph
        x = torch.randn(7, 32)
        for _ in range(3):
            torch.testing.assert_close(f(x.to("mtia")).cpu(), model(x), atol=1e-5, rtol=1e-5)
        assert dict(mtia_graphs.stats) == {"warmups": 2, "recordings": 2, "replays": 6}


def test_reduce_overhead_training_and_mutated_inputs():
    mtia_graphs.reset_stats()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(4)]
    cpu, mtia = copy.deepcopy(model), mtia_like(model)
    f = torch.compile(mtia, mode="reduce-overhead")
    opt, mopt = torch.optim.SGD(cpu.parameters(), lr=0.1), torch.optim.SGD(mtia.parameters(), lr=0.1)
    for x, y in data:
        loss = torch.nn.functional.mse_loss(cpu(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mloss = torch.nn.functional.mse_loss(f(x.to("mtia")), y.to("mtia"))
        mopt.zero_grad()
        mloss.backward()
        mopt.step()
        assert abs(loss.item() - mloss.item()) < 1e-5
    assert max_param_diff(cpu, mtia) < 1e-5
    # forward and backward graphs, each recorded once and replayed at every later step; the
    # backward's saved activations (static to Inductor) move, so it warms up once more
    assert dict(mtia_graphs.stats) == {"warmups": 3, "recordings": 2, "replays": 5}

    mtia_graphs.reset_stats()

    def bump(x):
        x.add_(1)
        return x * 2

    g = torch.compile(bump, mode="reduce-overhead")
    for i in range(4):
        x = torch.full((5,), float(i), device="mtia")
        out = g(x)
        assert x.cpu().eq(i + 1).all() and out.cpu().eq(2 * (i + 1)).all()
    assert dict(mtia_graphs.stats) == {"warmups": 1, "recordings": 1, "replays": 3}


def test_reduce_overhead_capture_failures_warn_or_raise(monkeypatch):
    # a graph with work that cannot be captured runs without a graph (warned);
    # in strict mode (the test suite's) it raises; any other error is raised
    def record_fails_with(message):
        def init(self, *args, **kwargs):
            raise RuntimeError(message)
        monkeypatch.setattr(mtia_graphs._Recording, "__init__", init)

    def fresh():
        torch._dynamo.reset()
        return torch.compile(lambda x: (x * 2).sin(), mode="reduce-overhead")

    x = torch.randn(8, device="mtia")
    cannot = "openmtia: aten::nonzero cannot be captured into an MTIAGraph: it runs synchronously"
    record_fails_with(cannot)
    f = fresh()
    f(x)  # warm-up
    with pytest.raises(RuntimeError, match="aten::nonzero cannot be captured"):
        f(x)  # strict
    monkeypatch.setenv("OPENMTIA_GRAPH_CAPTURE_STRICT", "0")
    mtia_graphs.reset_stats()
    f = fresh()
    f(x)
    with pytest.warns(UserWarning, match="running a compiled graph without MTIAGraph replay: capture failed: "
                                         "openmtia: aten::nonzero cannot be captured"):
        out = f(x)
    torch.testing.assert_close(out.cpu(), (x.cpu() * 2).sin())
    assert dict(mtia_graphs.stats) == {"warmups": 1, "capture_failures": 1}
    record_fails_with("openmtia: out of device memory in the graph pool")
    f = fresh()
    f(x)
    with pytest.raises(RuntimeError, match="out of device memory in the graph pool"):
        f(x)  # not a capture restriction: raised even when not strict


# ----------------------------------------------------------- MTIA's rules
def test_native_layer_norm_stays_a_device_kernel_forward_and_backward(wrapper):
    m = torch.nn.LayerNorm(16).to("mtia")
    x = torch.randn(4, 16, device="mtia", requires_grad=True)
    f = torch.compile(lambda x: m(x).relu().sum())

    def step(x):
        y = f(x)
        y.backward()
        return y

    y, (fwd, bwd) = run_and_get_code(step, x)
    if wrapper:  # C++: mtia's C shim (not torch's proxy executor), not decomposed
        assert "aoti_torch_mtia_native_layer_norm(" in fwd and "var_mean" not in fwd
        assert "aoti_torch_mtia_native_layer_norm_backward(" in bwd
        assert "proxy_executor" not in fwd + bwd and "aoti_torch_call_dispatcher" not in fwd + bwd
    else:
        assert "torch.ops.aten.native_layer_norm.default(" in fwd
        assert "torch.ops.aten.native_layer_norm_backward.default(" in bwd
    xc = x.detach().cpu().requires_grad_()
    mc = torch.nn.LayerNorm(16)
    mc.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    yc = mc(xc).relu().sum()
    yc.backward()
    torch.testing.assert_close(y.cpu(), yc.detach())
    torch.testing.assert_close(x.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.weight.grad.cpu(), mc.weight.grad, atol=1e-5, rtol=1e-5)


def test_cpu_still_decomposes_layer_norm():
    x = torch.randn(4, 16)
    _, (code,) = run_and_get_code(torch.compile(lambda x: torch.nn.functional.layer_norm(x, (16,))), x)
    assert "native_layer_norm.default(" not in code


def eleven_outputs(x0, *xs):
    return [torch.relu(x0 * xi + 1) for xi in xs]


@pytest.mark.parametrize("limit, kernels", [(None, 1), (4, 11)])
def test_max_fusion_unique_io_buffers(limit, kernels, wrapper):
    args = [torch.randn(64, device="mtia") for _ in range(12)]
    metrics.reset()
    with config.patch(max_fusion_unique_io_buffers=limit, fx_graph_cache=False):
        outs = torch.compile(eleven_outputs)(*args)
    assert metrics.generated_kernel_count == kernels
    for out, xi in zip(outs, args[1:]):
        torch.testing.assert_close(out.cpu(), torch.relu(args[0].cpu() * xi.cpu() + 1))


@pytest.mark.parametrize("disabled", [False, True])
def test_disable_welford_reduction(disabled):
    x = torch.randn(8, 100, device="mtia")
    with config.patch({"mtia.disable_welford_reduction": disabled, "fx_graph_cache": False}):
        (var, mean), (code,) = run_and_get_code(torch.compile(lambda a: torch.var_mean(a, dim=1)), x)
    assert ("welford" in code) != disabled
    rv, rm = torch.var_mean(x.cpu(), dim=1)
    torch.testing.assert_close(var.cpu(), rv, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean.cpu(), rm, atol=1e-5, rtol=1e-5)


def test_channels_last_convolution_compiles():
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(3, 4, 3)
    mconv = mtia_like(conv)
    out = torch.compile(mconv)(x.to("mtia"))
    torch.testing.assert_close(out.cpu(), conv(x), atol=1e-5, rtol=1e-5)
