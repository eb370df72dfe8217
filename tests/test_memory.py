"""The caching device allocator: statistics, empty_cache, steady-state reuse."""
import pytest
import torch
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)

# every test here reads the allocator's state: each starts from a settled device (tests/conftest.py)
pytestmark = pytest.mark.allocator_state


def test_a_warm_training_loop_makes_no_device_allocations():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to("mtia")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device="mtia"), torch.randn(32, 8, device="mtia")

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.mtia.synchronize()
    for _ in range(3):
        step()
    before = torch.mtia.memory_stats()
    for _ in range(5):
        step()
    after = torch.mtia.memory_stats()
    assert after["num_device_alloc"] == before["num_device_alloc"]
    assert after["reserved_bytes.all.current"] == before["reserved_bytes.all.current"]
    assert after["allocation.all.allocated"] > before["allocation.all.allocated"]  # blocks were reused


def test_stats_agree_across_torch_mtia_and_torch_accelerator():
    torch.mtia.empty_cache()
    base = torch.mtia.memory_allocated()
    t = torch.empty(3 << 20, dtype=torch.uint8, device="mtia")
    s = torch.mtia.memory_stats()
    assert torch.mtia.memory_allocated() == base + (3 << 20) == s["allocated_bytes.all.current"]
    assert torch.accelerator.memory_allocated() == torch.mtia.memory_allocated()
    assert torch.accelerator.memory_reserved() == s["reserved_bytes.all.current"] >= torch.mtia.memory_allocated()
    assert torch.accelerator.max_memory_allocated() == torch.mtia.max_memory_allocated() >= base + (3 << 20)
    acc = torch.accelerator.memory_stats()
    assert acc["allocated_bytes.all.current"] == s["allocated_bytes.all.current"]
    del t
    assert torch.mtia.memory_allocated() == base
    reserved = torch.mtia.memory_stats()["reserved_bytes.all.current"]
    assert reserved >= 3 << 20  # cached, not returned
    torch.mtia.empty_cache()
    assert torch.mtia.memory_stats()["reserved_bytes.all.current"] <= reserved - (3 << 20)
    torch.mtia.reset_peak_memory_stats()
    assert torch.mtia.max_memory_allocated() == base
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == base


def allocate_for_the_snapshot():
    return [torch.empty(n, device="mtia") for n in (100, 1000, 300_000)]


def test_memory_snapshot_is_in_cuda_format_and_renders(tmp_path):
    from torch.cuda import _memory_viz
    torch.mtia.init()  # torch.mtia.record_memory_history does nothing before mtia is initialized
    torch.mtia.record_memory_history("all", stacks="python")
    try:
        keep = allocate_for_the_snapshot()
        dropped = torch.empty(5000, device="mtia")
        del dropped
        torch.mtia.synchronize()
        snap = torch.mtia.snapshot()
    finally:
        torch.mtia.record_memory_history(None)
    assert set(snap) >= {"segments", "device_traces"}
    trace = snap["device_traces"][0]
    actions = [e["action"] for e in trace]
    assert "alloc" in actions and "free_requested" in actions and "free_completed" in actions
    allocs = [e for e in trace if e["action"] == "alloc"]
    # Python frames of the allocating code
    assert any(f["name"] == "allocate_for_the_snapshot" for e in allocs for f in e["frames"])
    # the blocks of live tensors, with their frames, inside segments
    live = {t.data_ptr() for t in keep}
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert live <= {b["address"] for b in blocks}
    for s in snap["segments"]:
        assert s["total_size"] == sum(b["size"] for b in s["blocks"])
    # PyTorch's own tools read it: the segment summary checks the accounting,
    # the trace printout follows the events, trace_plot makes the HTML page
    summary = _memory_viz.segsum(snap)
    assert "total_reserved" in summary
    assert "entries" in _memory_viz.trace(snap)
    html = _memory_viz.trace_plot(snap)
    assert "<html>" in html and "snapshot.pickle" in html
    (tmp_path / "trace.html").write_text(html)
    (tmp_path / "segments.html").write_text(_memory_viz.segment_plot(snap))
    del keep


def test_memory_history_records_segments_and_ooms():
    torch.mtia.init()
    torch.mtia.empty_cache()
    torch.mtia.record_memory_history("all", stacks="all")  # Python and C++ frames
    try:
        t = torch.empty(1 << 20, device="mtia")
        del t
        torch.mtia.empty_cache()
        try:
            torch.empty(1 << 40, device="mtia")
        except torch.OutOfMemoryError:
            pass
        snap = torch.mtia.snapshot()
    finally:
        torch.mtia.record_memory_history(None)
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "segment_alloc" in actions and "segment_free" in actions and "oom" in actions
    alloc = next(e for e in snap["device_traces"][0] if e["action"] == "alloc")
    names = [f["name"] for f in alloc["frames"]]
    assert "test_memory_history_records_segments_and_ooms" in names  # Python
    assert any("openmtia::" in n for n in names), names  # C++
    oom = next(e for e in snap["device_traces"][0] if e["action"] == "oom")
    assert oom["size"] == 4 << 40 and oom["device_free"] > 0


@pytest.mark.needs_async
def test_pinned_blocks_are_cached_and_reused_only_after_the_copy_completed():
    import openmtia
    torch.accelerator.empty_host_cache()
    x = torch.randn(4096).pin_memory()
    ptr = x.data_ptr()
    del x
    y = torch.empty(4096, pin_memory=True)
    assert y.data_ptr() == ptr  # the cached block
    y.fill_(1.0)
    gate = openmtia._C_test.launch_blocking_task(0)
    d = y.to("mtia", non_blocking=True)  # waits behind the held stream
    del y
    z = torch.empty(4096, pin_memory=True)
    zptr = z.data_ptr()
    assert zptr != ptr  # not while the copy may still read it
    z.fill_(2.0)
    gate.release()
    torch.mtia.synchronize()
    assert torch.equal(d.cpu(), torch.ones(4096))
    del z
    torch.mtia.synchronize()  # the stream passes the event recorded when y was freed
    w1 = torch.empty(4096, pin_memory=True)
    w2 = torch.empty(4096, pin_memory=True)
    assert {w1.data_ptr(), w2.data_ptr()} == {ptr, zptr}  # both blocks reused, no new pinned memory
    del w1, w2
    torch.accelerator.empty_host_cache()


def test_bad_memory_history_arguments_and_rng_states_raise():
    torch.mtia.init()
    with pytest.raises(RuntimeError, match="stacks must be"):
        torch.mtia.record_memory_history("all", stacks="everything")
    with pytest.raises(RuntimeError, match="enabled must be"):
        torch.mtia.record_memory_history("sometimes")
    with pytest.raises(RuntimeError, match="RNG state must be a torch.ByteTensor of 16 bytes"):
        torch.mtia.set_rng_state(torch.zeros(5, dtype=torch.uint8))
    assert torch.rand(2, device="mtia").shape == (2,)


def test_settling_frees_the_tensors_that_garbage_cycles_hold():
    """What the allocator_state tests start from (tests/conftest.py): a tensor
    held by a reference cycle stays allocated until the collector runs (in
    CI it ran in the middle of a later test, between two stats reads)."""
    import gc
    from conftest import settle_device
    gc.disable()  # (the collector must not run before settle_device does)
    try:
        base = torch.mtia.memory_allocated()
        cycle = [torch.empty(256, device="mtia")]
        cycle.append(cycle)
        del cycle
        assert torch.mtia.memory_allocated() == base + 1024  # garbage, still allocated
        settle_device()
        assert torch.mtia.memory_allocated() == base
    finally:
        gc.enable()


@pytest.mark.needs_async
def test_empty_cache_releases_blocks_whose_free_waits_for_another_stream():
    """As CUDA's: a freed block that another stream used (record_stream) stops
    counting as allocated at the free, stays active until that stream passes
    the free, and empty_cache() waits for it and returns its segment."""
    import threading
    import time
    torch.full((1 << 20,), 2.0, device="mtia") * 3  # a signature's first call waits for the stream: made here
    torch.mtia.synchronize()
    torch.mtia.empty_cache()
    reserved = torch.accelerator.memory_reserved
    before = reserved()
    x = torch.full((1 << 20,), 2.0, device="mtia")  # 4 MiB: a segment of its own
    x_segment = reserved() - before
    assert x_segment >= 4 << 20
    side = torch.mtia.Stream()
    side.wait_stream(torch.mtia.current_stream())
    with torch.mtia.stream(side):
        gate = openmtia._C_test.launch_blocking_task(0)  # holds the side stream
        y = x * 3  # queued behind the gate: reads x
    x.record_stream(side)
    held = reserved()
    base = torch.mtia.memory_allocated()
    active = torch.mtia.memory_stats()["active_bytes.all.current"]
    del x
    assert torch.mtia.memory_allocated() == base - (4 << 20)  # not allocated: freed by the host
    assert torch.mtia.memory_stats()["active_bytes.all.current"] == active  # but not free while the side stream may read it
    assert reserved() == held
    threading.Timer(0.3, gate.release).start()
    t0 = time.monotonic()
    torch.mtia.empty_cache()  # waits for the side stream, then returns x's segment
    assert time.monotonic() - t0 >= 0.25
    assert torch.mtia.memory_stats()["active_bytes.all.current"] == active - (4 << 20)
    assert reserved() == held - x_segment  # y's segment stays
    torch.testing.assert_close(y.cpu(), torch.full((1 << 20,), 6.0))
