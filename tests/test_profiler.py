"""Device kernels in torch.profiler: each mtia task as a device event on its stream."""
import json

import torch
from torch.profiler import ProfilerActivity, profile


def test_device_tasks_are_device_events_with_stream_and_times(tmp_path):
    a = torch.randn(512, 512, device="mtia")
    s = torch.mtia.Stream()

    def work():
        b = a @ a
        c = torch.relu(b).sum()
        with torch.mtia.stream(s):
            d = a * 2
        torch.mtia.synchronize()
        return c, d
    work()  # each signature's first call runs on the host (synchronously): profiled are the device tasks
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as prof:
        work()
    device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.MTIA]
    names = {e.name for e in device_events}
    assert "mtia:aten::mm" in names, names
    # device time is attributed to the host ops that launched the tasks
    table = {e.key: e for e in prof.key_averages()}
    mm, kernel = table["aten::mm"], table["mtia:aten::mm"]
    assert mm.cpu_time_total > 0
    assert kernel.self_device_time_total > 0 and kernel.cpu_time_total == 0
    # each kernel is correlated with the host op that launched it
    kineto = prof.profiler.kineto_results.events()
    ops = {e.correlation_id(): e.name() for e in kineto if e.device_type() == torch.autograd.DeviceType.CPU}
    kernels = [e for e in kineto if e.device_type() == torch.autograd.DeviceType.MTIA]
    assert kernels and all(e.linked_correlation_id() > 0 for e in kernels)
    assert {ops.get(e.linked_correlation_id()) for e in kernels if e.name() == "mtia:aten::mm"} == {"aten::mm"}
    assert "MTIA" in prof.key_averages().table(sort_by="device_time_total", row_limit=5)

    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "mtia_ccp_events" or e.get("cat") == "kernel"]
    assert kernels, sorted({e.get("cat") for e in events})
    streams = {(k["pid"], k["tid"]) for k in kernels}
    assert len(streams) >= 2, streams  # the default stream and the side stream: one row each
    assert all(k["dur"] >= 0 and "ts" in k for k in kernels)
    assert any(k["args"].get("correlation") for k in kernels), kernels[:3]
    assert any(e.get("ph") == "f" or e.get("cat") == "ac2g" for e in events)  # flow arrows op -> kernel


def test_memory_events_with_profile_memory(tmp_path):
    torch.ones(2, device="mtia").add_(1)  # the device is up before the trace
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA], profile_memory=True) as prof:
        x = torch.empty(1 << 20, device="mtia")
        del x
        torch.mtia.synchronize()
    assert any(e.name == "[memory]" for e in prof.events())
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    mem = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    mtia = [m for m in mem if m.get("Device Type") == int(torch.autograd.DeviceType.MTIA)]
    assert [m["Bytes"] for m in mtia] == [4 << 20, -(4 << 20)], mem
    assert mtia[0]["Total Allocated"] >= 4 << 20 and mtia[0]["Total Reserved"] >= mtia[0]["Total Allocated"]
