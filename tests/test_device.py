"""torch.mtia / torch.accelerator / torch.Stream / torch.Event / RNG on mtia."""
import time

import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)


def test_availability_and_accelerator():
    assert torch.mtia.is_available()
    assert torch.mtia.device_count() == 2
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("mtia")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.mtia.current_device() == 1
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()


def test_set_device_and_device_context():
    torch.mtia.set_device(1)
    assert torch.mtia.current_device() == 1
    assert torch.empty(1, device="mtia").device == torch.device("mtia:1")
    torch.mtia.set_device(0)
    with torch.mtia.device(1):
        assert torch.mtia.current_device() == 1
        assert torch.zeros(2, device="mtia").device.index == 1
    assert torch.mtia.current_device() == 0


def test_device_properties_and_capability():
    props = torch.mtia.get_device_properties(0)
    assert props["total_memory"] == 8 << 30
    assert props["name"]
    assert props["multi_processor_count"] >= 1
    assert torch.mtia.get_device_capability() == (props["major"], props["minor"])
    assert torch.mtia.is_bf16_supported()


def test_streams():
    default = torch.mtia.default_stream()
    assert torch.mtia.current_stream() == default
    s = torch.Stream(device="mtia")
    assert s.device == torch.device("mtia:0") and s != default
    with torch.mtia.stream(s):
        assert torch.mtia.current_stream() == s
        x = torch.ones(100, device="mtia") * 3
    assert torch.mtia.current_stream() == default
    s.synchronize()
    assert s.query()
    torch.mtia.set_stream(s)
    assert torch.mtia.current_stream() == s
    torch.mtia.set_stream(default)
    assert torch.accelerator.current_stream() == default
    high = torch.Stream(device="mtia:1", priority=-1)
    assert high.device == torch.device("mtia:1")
    assert x.sum().item() == 300


@pytest.mark.needs_async
def test_stream_query_reflects_pending_work():
    s = torch.Stream(device="mtia")
    with torch.mtia.stream(s):
        gate = openmtia._C_test.launch_blocking_task(0)
    assert not s.query()
    gate.release()
    s.synchronize()
    assert s.query()


@pytest.mark.needs_async
def test_events_order_streams_and_time():
    s1, s2 = torch.Stream(device="mtia"), torch.Stream(device="mtia")
    start = torch.Event(device="mtia", enable_timing=True)
    end = torch.Event(device="mtia", enable_timing=True)
    with torch.mtia.stream(s1):
        start.record()
        gate = openmtia._C_test.launch_blocking_task(0)
        x = torch.full((10,), 2.0, device="mtia")
        end.record()
    assert not end.query()
    s2.wait_event(end)  # s2's later work waits for s1
    with torch.mtia.stream(s2):
        y = torch.zeros(10, device="mtia")
        y.copy_(x)
    assert not s2.query()
    time.sleep(0.05)
    gate.release()
    end.synchronize()
    assert end.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    assert start.elapsed_time(end) >= 40
    s2.synchronize()
    assert torch.equal(y.cpu(), torch.full((10,), 2.0))


def test_elapsed_time_requires_timing():
    a, b = torch.Event(device="mtia"), torch.Event(device="mtia")
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):  # as torch raises for cuda
        a.elapsed_time(b)


@pytest.mark.needs_async
def test_wait_stream():
    s = torch.Stream(device="mtia")
    with torch.mtia.stream(s):
        gate = openmtia._C_test.launch_blocking_task(0)
    torch.mtia.current_stream().wait_stream(s)
    assert not torch.mtia.current_stream().query()
    gate.release()
    torch.mtia.synchronize()


def test_rng_seeding_and_state():
    torch.mtia.manual_seed(123)
    a = torch.randn(5, device="mtia")
    torch.mtia.manual_seed(123)
    b = torch.randn(5, device="mtia")
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.mtia.initial_seed() == 123
    state = torch.mtia.get_rng_state()
    c = torch.rand(5, device="mtia")
    torch.mtia.set_rng_state(state)
    d = torch.rand(5, device="mtia")
    assert torch.equal(c.cpu(), d.cpu())
    # the mtia generator is not the CPU one
    torch.manual_seed(0)
    cpu_first = torch.rand(5)
    torch.manual_seed(0)
    torch.mtia.manual_seed(99)
    torch.rand(5, device="mtia")
    assert torch.equal(torch.rand(5), cpu_first)


def test_rng_devices_are_independent_and_seed_all():
    torch.mtia.manual_seed_all(7)
    a0 = torch.rand(4, device="mtia:0").cpu()
    a1 = torch.rand(4, device="mtia:1").cpu()
    assert torch.equal(a0, a1)  # same seed, separate generators
    torch.mtia.manual_seed_all(7)
    torch.rand(100, device="mtia:1")  # advancing device 1 ...
    assert torch.equal(torch.rand(4, device="mtia:0").cpu(), a0)  # ... leaves device 0 alone
    assert isinstance(torch.mtia.seed(), int)
    assert len(torch.mtia.get_rng_state_all()) == 2


def test_torch_manual_seed_seeds_mtia():
    torch.manual_seed(5)
    a = torch.randn(3, device="mtia").cpu()
    torch.manual_seed(5)
    assert torch.equal(torch.randn(3, device="mtia").cpu(), a)


def test_explicit_generator():
    g = torch.Generator(device="mtia")
    assert g.device == torch.device("mtia:0")
    g.manual_seed(3)
    a = torch.rand(4, device="mtia", generator=g)
    g.manual_seed(3)
    b = torch.rand(4, device="mtia", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    x = torch.empty(1000, device="mtia").normal_(generator=g)
    assert abs(x.mean().item()) < 0.2


def test_pin_memory():
    t = torch.randn(10)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and torch.equal(p, t)
    assert torch.empty(4, pin_memory=True).is_pinned()


def test_tensor_to_and_mtia_method():
    t = torch.arange(6).reshape(2, 3)
    assert torch.equal(t.to("mtia").cpu(), t)
    assert t.mtia().device == torch.device("mtia:0")
    assert t.mtia(1).device == torch.device("mtia:1")
    assert t.to(torch.device("mtia", 1)).to("mtia:0").device.index == 0


@pytest.mark.allocator_state
def test_memory_stats_shape():
    before = torch.mtia.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="mtia")
    assert torch.mtia.memory_allocated() >= before + (1 << 20)
    assert torch.mtia.max_memory_allocated() >= torch.mtia.memory_allocated()
    assert "dram" in torch.mtia.memory_stats()
    del x
    torch.mtia.synchronize()
    assert torch.mtia.memory_allocated() == before
    torch.mtia.reset_peak_memory_stats()
    assert torch.mtia.max_memory_allocated() == before


def test_serialization_roundtrip(tmp_path):
    x = torch.randn(3, 4, device="mtia:1")
    torch.save({"x": x}, tmp_path / "x.pt")
    y = torch.load(tmp_path / "x.pt")["x"]
    assert y.device == torch.device("mtia:1") and torch.equal(y.cpu(), x.cpu())
    z = torch.load(tmp_path / "x.pt", map_location="cpu")["x"]
    assert z.device.type == "cpu" and torch.equal(z, x.cpu())
