"""Bad input raises clear Python errors and the device keeps working."""
import pytest
import torch

import openmtia
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)


def still_works(device="mtia"):
    x = torch.arange(4.0, device=device)
    assert (x * 2).sum().item() == 12.0


def test_mixing_cpu_and_mtia_raises_like_cuda():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="mtia") + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(torch.ones(2, 2, device="mtia"), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="mtia:0") + torch.ones(3, device="mtia:1")
    # 0-dim CPU tensors act as scalars, as they do for cuda
    assert torch.equal((torch.ones(3, device="mtia") + torch.tensor(1.0)).cpu(), torch.full((3,), 2.0))
    still_works()


def test_invalid_device_index_raises():
    with pytest.raises(RuntimeError, match="invalid mtia device index 7"):
        torch.empty(2, device="mtia:7")
    with pytest.raises(RuntimeError, match="invalid mtia device index"):
        torch.mtia.set_device(5)
    with pytest.raises(RuntimeError, match="invalid mtia device index"):
        torch.ones(2).to("mtia:2")
    with pytest.raises(RuntimeError, match=rf"invalid mtia device index 9 \(device count is {torch.mtia.device_count()}\)"):
        torch.mtia.get_device_properties(9)
    assert torch.mtia.current_device() == 0
    still_works()


@pytest.mark.allocator_state
def test_out_of_memory_raises_and_device_recovers():
    total = torch.mtia.get_device_properties(0)["total_memory"]
    torch.mtia.empty_cache()
    free_before, _ = openmtia.device_memory_info(0)
    seen = []
    torch.mtia.attach_out_of_memory_observer(lambda *args: seen.append(args))
    # CUDA's message: the request, and the device's allocated, reserved and free memory
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 8.00 GiB\. mtia:0 has a total capacity of "
                       r"8.00 GiB of which .* is free\. Of the allocated memory .* is allocated by PyTorch, and .* "
                       r"is reserved by PyTorch but unallocated"):
        torch.empty(total // 4 + 1, dtype=torch.float32, device="mtia")
    assert seen and seen[-1][0] == 0 and seen[-1][1] == total + 4  # (device, requested, allocated, free)
    # several large allocations that fit, then one too many
    blocks = [torch.empty(total // 4, dtype=torch.uint8, device="mtia") for _ in range(3)]
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total // 2, dtype=torch.uint8, device="mtia")
    assert len(seen) == 2
    del blocks
    torch.mtia.synchronize()
    # the freed blocks are cached: an allocation that needs them frees the cache and retries
    retries = torch.mtia.memory_stats()["num_alloc_retries"]
    big = torch.empty(total // 2 + (64 << 20), dtype=torch.uint8, device="mtia")
    assert torch.mtia.memory_stats()["num_alloc_retries"] == retries + 1
    del big
    torch.mtia.empty_cache()
    assert openmtia.device_memory_info(0)[0] == free_before
    assert torch.mtia.memory_stats()["dram"]["num_ooms"] >= 2
    still_works()


def test_failing_async_task_raises_at_next_sync():
    openmtia._C_test.launch_failing_task(0, "gather_kernel", "index 12 is out of bounds for size 4")
    with pytest.raises(RuntimeError, match="gather_kernel.*index 12 is out of bounds"):
        torch.mtia.synchronize()
    torch.mtia.synchronize()  # reported once
    still_works()


def test_failing_async_task_raises_at_stream_and_event_sync_and_item():
    s = torch.Stream(device="mtia")
    with torch.mtia.stream(s):
        openmtia._C_test.launch_failing_task(0, "bad_on_stream", "boom")
    with pytest.raises(RuntimeError, match="bad_on_stream"):
        s.synchronize()
    ev = torch.Event(device="mtia")
    openmtia._C_test.launch_failing_task(0, "bad_before_event", "boom")
    ev.record()
    with pytest.raises(RuntimeError, match="bad_before_event"):
        ev.synchronize()
    x = torch.ones(2, device="mtia")
    openmtia._C_test.launch_failing_task(0, "bad_before_item", "boom")
    with pytest.raises(RuntimeError, match="bad_before_item"):
        x.sum().item()
    still_works()


def test_an_earlier_task_error_raises_as_it_is_at_a_first_call_of_an_index_op():
    """A new signature's first call waits for the stream: a task that failed
    before it raises there, once, with its own message. (It was taken for the
    index op's own error, deferred and raised at the next sync wrapped twice:
    "openmtia: openmtia: asynchronous task ...".)"""
    x, idx = torch.randn(5, 3, device="mtia"), torch.tensor([[4, 0, 1]], device="mtia")
    torch.mtia.synchronize()
    openmtia._C._clear_plan_cache()  # gather's call below is a first call (gather runs through the fallback)
    openmtia._C_test.launch_failing_task(0, "earlier_kernel", "index 12 is out of bounds for size 4")
    with pytest.raises(RuntimeError, match="earlier_kernel.*index 12 is out of bounds") as info:
        torch.gather(x, 0, idx)
    assert str(info.value).count("asynchronous task") == 1, str(info.value)
    torch.mtia.synchronize()  # reported once
    torch.testing.assert_close(torch.gather(x, 0, idx).cpu(), torch.gather(x.cpu(), 0, idx.cpu()))
    still_works()


def test_unsupported_layouts_and_devices_raise():
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device="mtia", pin_memory=True)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        torch.zeros(2, device="mtia").copy_(torch.zeros(2, device="meta"))
    still_works()


# the dtypes CPU's copy kernel cannot convert to (torch 2.13)
UNCONVERTIBLE = ([torch.bits8, torch.bits16, torch.bits1x8, torch.bits2x4, torch.bits4x2, torch.float4_e2m1fn_x2]
                 + [getattr(torch, f"int{i}") for i in range(1, 8)] + [getattr(torch, f"uint{i}") for i in range(1, 8)])


@pytest.mark.parametrize("dtype", UNCONVERTIBLE, ids=str)
@pytest.mark.parametrize("path", ["on mtia", "to mtia", "from mtia", "mtia:0 to mtia:1"])
def test_a_dtype_cpu_cannot_convert_to_raises_at_the_call(dtype, path):
    """Errors that depend on types alone are raised at the call, as CPU raises
    them (NotImplementedError naming the dtype), never at the next sync: one
    bad call must not fail whatever runs next."""
    with pytest.raises(NotImplementedError) as cpu:
        torch.ones(3).to(dtype)
    src = torch.ones(3) if path == "to mtia" else torch.ones(3, device="mtia")
    target = {"on mtia": "mtia", "to mtia": "mtia", "from mtia": "cpu", "mtia:0 to mtia:1": "mtia:1"}[path]
    name = str(cpu.value).split("for ")[-1]  # 'UInt6'
    with pytest.raises(NotImplementedError, match=f"not implemented for {name}"):
        src.to(target, dtype)
    torch.mtia.synchronize()  # nothing deferred
    torch.mtia.synchronize(1)
    still_works()
