"""AOTInductor packages on mtia (issue 41, point 2): torch.export →
aoti_compile_and_package → aoti_load_package, run on the device.

Each package is built once per module (a build is a C++ compile of the whole
model); results are compared with the same model on CPU in eager mode.
"""
import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task)


class Net(torch.nn.Module):
    """Inductor's kernels, extern mm/addmm, C-shim fallbacks (sort, and
    native_layer_norm, which mtia keeps whole), and an op that goes through
    torch.s proxy executor (linalg_inv_ex and its check)."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.l2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.ln(torch.relu(self.l1(x)))
        top = torch.sort(h, dim=-1, descending=True)[0][:, :4]
        g = h[:4, :4]
        inv = torch.linalg.inv(torch.eye(4, device=x.device) + g.T @ g)
        return self.l2(h).softmax(-1) + top + inv.sum()


class Small(torch.nn.Module):
    """No op that synchronizes (linalg checks its errors on the host)."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)

    def forward(self, x):
        return torch.sort(torch.relu(self.l1(x)), dim=-1)[0] * 2 + 1


def on(model, device):
    copy = type(model)().eval()
    copy.load_state_dict(model.state_dict())
    return copy.to(device)


def build(model, example, tmp_path_factory, name, dynamic_shapes=None, **inductor_configs):
    ep = torch.export.export(on(model, "mtia"), (example.to("mtia"),), dynamic_shapes=dynamic_shapes)
    path = str(tmp_path_factory.mktemp("aoti") / f"{name}.pt2")
    return torch._inductor.aoti_compile_and_package(ep, package_path=path, inductor_configs=inductor_configs)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="module")
def net_package(net, tmp_path_factory):
    batch = torch.export.Dim("batch", min=4, max=64)
    return build(net, torch.randn(8, 16), tmp_path_factory, "net", dynamic_shapes={"x": {0: batch}})


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(1)
    return Small().eval()


@pytest.fixture(scope="module")
def small_package(small, tmp_path_factory):
    return build(small, torch.randn(8, 16), tmp_path_factory, "small")


def test_package_runs_on_mtia_like_cpu_eager_with_dynamic_batch(net, net_package):
    runner = torch._inductor.aoti_load_package(net_package)
    with torch.no_grad():
        for batch in (8, 4, 37):  # the traced size, then others within the Dim's range
            x = torch.randn(batch, 16)
            out = runner(x.to("mtia"))
            assert out.device == torch.device("mtia:0")
            torch.testing.assert_close(out.cpu(), net(x), atol=1e-5, rtol=1e-5)


def test_a_dynamic_batch_exported_from_one_takes_every_size_of_its_range(small, tmp_path_factory):
    """Inductor starts backed sizes at 2 (its 0/1 specialization); the
    package's input checks take the exported range, [1, 1024], as CPU's
    package does: one request at a time is the commonest deployment."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    package = build(small, torch.randn(8, 16), tmp_path_factory, "from_one", dynamic_shapes={"x": {0: batch}})
    runner = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        for n in (1, 7, 300, 1, 1024):
            x = torch.randn(n, 16)
            torch.testing.assert_close(runner(x.to("mtia")).cpu(), small(x), atol=1e-5, rtol=1e-5)
        with pytest.raises(RuntimeError, match=r"dim value is too large at 0, expected to be <= 1024, but got: 1025"):
            runner(torch.randn(1025, 16, device="mtia"))
        with pytest.raises(RuntimeError, match=r"dim value is too small at 0, expected it to be >= 1, but got: 0"):
            runner(torch.randn(0, 16, device="mtia"))
        torch.testing.assert_close(runner(torch.ones(1, 16).to("mtia")).cpu(), small(torch.ones(1, 16)), atol=1e-5,
                                   rtol=1e-5)  # usable after the errors


def test_a_dynamic_batch_keeps_the_exported_lower_bound(net_package):
    runner = torch._inductor.aoti_load_package(net_package)  # Dim("batch", min=4, max=64)
    with pytest.raises(RuntimeError, match=r"dim value is too small at 0, expected it to be >= 4, but got: 3"):
        runner(torch.randn(3, 16, device="mtia"))


def test_kept_ops_are_shim_calls_and_only_the_unlisted_one_uses_the_proxy_executor(net_package):
    import zipfile

    with zipfile.ZipFile(net_package) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".wrapper.cpp")]
        code = z.read(name).decode()
    assert code.count("aoti_torch_mtia_native_layer_norm(") == 1
    assert "aoti_torch_mtia_sort" in code and "aoti_torch_mtia_addmm_out(" in code
    assert code.count("aoti_torch_proxy_executor_call_function(") == 2  # linalg_inv_ex, _linalg_check_errors


@pytest.mark.allocator_state
def test_weights_are_in_device_memory(small, small_package):
    torch.mtia.synchronize()
    before = torch.mtia.memory_allocated()
    runner = torch._inductor.aoti_load_package(small_package)
    weight_bytes = sum(p.numel() * p.element_size() for p in small.parameters())
    assert torch.mtia.memory_allocated() - before >= weight_bytes
    del runner
    torch.mtia.synchronize()
    assert torch.mtia.memory_allocated() == before  # freed with the model


@pytest.mark.needs_async
def test_run_returns_before_its_kernels_run(small, small_package):
    runner = torch._inductor.aoti_load_package(small_package)
    x = torch.randn(8, 16)
    xm = x.to("mtia")
    with torch.no_grad():
        runner(xm)
        torch.mtia.synchronize()
        gate = openmtia._C_test.launch_blocking_task(0, 30.0)
        try:
            out = runner(xm)  # queued behind the gate: the kernels, the mm and the sort
            assert not torch.mtia.current_stream().query()
        finally:
            gate.release()
    torch.testing.assert_close(out.cpu(), small(x), atol=1e-5, rtol=1e-5)


def test_runs_on_the_current_stream(small, small_package):
    runner = torch._inductor.aoti_load_package(small_package)
    x = torch.randn(8, 16)
    s = torch.mtia.Stream()
    with torch.no_grad(), torch.mtia.stream(s):
        xm = x.to("mtia")
        out = runner(xm)
        s.synchronize()
    torch.testing.assert_close(out.cpu(), small(x), atol=1e-5, rtol=1e-5)


def test_a_package_built_on_mtia0_runs_on_mtia1(net, net_package):
    runner = torch._inductor.aoti_load_package(net_package, device_index=1)
    x = torch.randn(8, 16)
    with torch.no_grad():
        out = runner(x.to("mtia:1"))
    assert out.device == torch.device("mtia:1")
    torch.testing.assert_close(out.cpu(), net(x), atol=1e-5, rtol=1e-5)


def test_bfloat16_package_matches_eager(tmp_path_factory):
    torch.manual_seed(2)
    model = Small().eval().to(torch.bfloat16)
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    ep = torch.export.export(on(model, "mtia").to(torch.bfloat16), (x.to("mtia"),))
    path = torch._inductor.aoti_compile_and_package(
        ep, package_path=str(tmp_path_factory.mktemp("aoti") / "bf16.pt2"))
    with torch.no_grad():
        out = torch._inductor.aoti_load_package(path)(x.to("mtia"))
        ref = model(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), ref, atol=0.05, rtol=0.02)


@pytest.mark.allocator_state
def test_weights_kept_outside_the_library_are_loaded_onto_the_device(small, tmp_path_factory):
    # (torch 2.13's aoti_load_package does not install such weights, on CPU
    # either: the run crashes; load_pt2 with load_weights_from_disk does)
    from torch.export.pt2_archive._package import load_pt2

    x = torch.randn(8, 16)
    path = build(small, x, tmp_path_factory, "outside", **{
        "aot_inductor.package_constants_in_so": False,
        "aot_inductor.package_constants_on_disk_format": "pickle_weights"})
    torch.mtia.synchronize()
    before = torch.mtia.memory_allocated()
    runner = load_pt2(path, load_weights_from_disk=True).aoti_runners["model"]
    assert torch.mtia.memory_allocated() > before  # torch.load put them on mtia
    with torch.no_grad():
        torch.testing.assert_close(runner(x.to("mtia")).cpu(), small(x), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------- bad input
def test_bad_inputs_raise_naming_the_problem_and_the_device_stays_usable(small, small_package):
    runner = torch._inductor.aoti_load_package(small_package)
    x = torch.randn(8, 16)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"model loaded for mtia:0: input 0 is on cpu"):
            runner(x)
        with pytest.raises(RuntimeError, match=r"model loaded for mtia:0: input 0 is on mtia:1"):
            runner(x.to("mtia:1"))
        with pytest.raises(RuntimeError, match=r"input_handles\[0\]: unmatched dtype"):
            runner(x.double().to("mtia"))
        with pytest.raises(RuntimeError, match=r"input_handles\[0\]: unmatched dim value at 1, expected: 16, but got: 15"):
            runner(torch.randn(8, 15, device="mtia"))
        # the process, the device and the model stay usable
        torch.testing.assert_close(runner(x.to("mtia")).cpu(), small(x), atol=1e-5, rtol=1e-5)
    torch.mtia.synchronize()


def test_cpu_package_with_mtia_inputs_raises_as_cuda_does(small, tmp_path_factory):
    x = torch.randn(8, 16)
    ep = torch.export.export(on(small, "cpu"), (x,))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path_factory.mktemp("aoti") / "cpu.pt2"))
    with pytest.raises(RuntimeError, match="Incorrect device passed to aoti_runner_cpu"):
        torch._inductor.aoti_load_package(path, device_index=0)  # torch's CPU runner refuses a device index
    runner = torch._inductor.aoti_load_package(path)
    with torch.no_grad(), pytest.raises(RuntimeError, match="device mtia:0, but got cpu"):
        runner(x.to("mtia"))  # its CPU kernels refuse mtia tensors
    with torch.no_grad():
        torch.testing.assert_close(runner(x), small(x))


def test_truncated_or_corrupt_package_raises(small_package, tmp_path):
    data = open(small_package, "rb").read()
    cut, bad = tmp_path / "cut.pt2", tmp_path / "bad.pt2"
    cut.write_bytes(data[: len(data) // 2])
    bad.write_bytes(b"not a zip" + data[9:])
    for path, message in ((cut, "Failed to initialize zip archive"), (bad, "Failed to extract zip file")):
        with pytest.raises(RuntimeError, match=message):
            torch._inductor.aoti_load_package(str(path))
    assert (torch.ones(2, device="mtia") + 1).cpu().eq(2).all()
