"""Device kernels in torch.profiler: each mtia task as a device event on its
stream, in the shape of a real MTIA's trace (launch events, correlation ids,
flows, stream numbers, row and event names)."""
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
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


# A real MTIA runtime's launch events, by the kind of work (the reference
# traces in the workplace's ../shared/reference/mtia-traces/, from HTA's test
# data; HTA counts kernel launches by "^runFunction"). Where the reference is
# at hand (beside the repository), the test also reads the names from it.
LAUNCH_NAME = "runFunction - job_prep_and_submit_for_execution"
REFERENCES = [os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference", "mtia-traces",
                           f"mtia_{run}_rank_0.json.gz") for run in ("training", "inference")]


def launch_name(device_name):
    """The launch of a device event of this name, as a real MTIA runtime names it."""
    if device_name.startswith("Memcpy "):  # "Memcpy HtoD (Pinned -> Device)": "enqueueCommand memcpyHtoDAsync"
        return f"enqueueCommand memcpy{device_name.split()[1]}Async"
    return {"Stream Wait Event Sync": "enqueueCommand waitOnEvent",
            "Event Record Sync": "recordEvent"}.get(device_name, LAUNCH_NAME)


def step_trace(tmp_path, device="mtia:0"):
    """A training step's trace: copies both ways (pinned and pageable), a
    device-to-device copy, kernels (native and the fallback's), a side
    stream that waits on an event of the default stream, an optimizer."""
    torch.mtia.set_device(device)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.AdamW(m.parameters())
    x = torch.randn(32, 64).pin_memory()
    host = torch.empty(32, 8).pin_memory()
    side = torch.mtia.Stream()

    def step():
        xm = x.to(device, non_blocking=True)
        loss = m(xm).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ready = torch.mtia.Event()
        ready.record()
        with torch.mtia.stream(side):
            side.wait_event(ready)
            y = xm.clone()  # device to device
        torch.mtia.current_stream().wait_stream(side)
        host.copy_(m(y), non_blocking=True)  # to pinned memory
        return loss.item(), y[:4].cpu()  # (a read to pageable memory)
    step()  # (each signature's first call runs synchronously: the traced steps are asynchronous)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA],
                 schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            step()
            prof.step()
    torch.mtia.set_device("mtia:0")
    return json.loads(path.read_text()), prof


def test_every_device_event_has_one_launch_on_the_launching_thread_and_a_flow(tmp_path):
    # as a real MTIA's trace (../shared/reference/mtia-traces): a launch event
    # (mtia_runtime, "runFunction - ...") on the host thread that submitted the
    # work, with a correlation id of its own, a flow arrow from it to the
    # device event, which carries the id, its stream and device, and the
    # launching op's External id
    trace, _ = step_trace(tmp_path)
    events = trace["traceEvents"]
    device = [e for e in events if e.get("cat") == "mtia_ccp_events"]
    launches = [e for e in events if e.get("cat") == "mtia_runtime"]
    assert device and launches
    names = {e["name"] for e in launches}
    assert names == {LAUNCH_NAME, "enqueueCommand memcpyHtoDAsync", "enqueueCommand memcpyDtoHAsync",
                     "enqueueCommand memcpyDtoDAsync", "enqueueCommand waitOnEvent", "recordEvent"}, names
    if all(os.path.exists(r) for r in REFERENCES):
        ref = {e["name"] for r in REFERENCES for e in json.load(gzip.open(r))["traceEvents"]
               if e.get("cat") == "mtia_runtime"}
        assert names - {"enqueueCommand memcpyDtoDAsync"} <= ref, names - ref  # (the references copy no DtoD)
    by_correlation = {}
    threads = {int(t) for t in os.listdir("/proc/self/task")}
    for launch in launches:  # (the backward's launch from the autograd engine's device thread)
        assert launch["pid"] == os.getpid() and launch["tid"] in threads, launch
        by_correlation.setdefault(launch["args"]["correlation"], []).append(launch)
    correlations = [e["args"]["correlation"] for e in device]
    assert len(correlations) == len(set(correlations))  # no two pieces of work share an id
    flows = {(e["ph"], e["id"]) for e in events if e.get("cat") == "ac2g"}
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    for e in device:
        c = e["args"]["correlation"]
        assert len(by_correlation.get(c, [])) == 1, e
        launch = by_correlation[c][0]
        assert launch["name"] == launch_name(e["name"]), (launch, e)
        assert (launch["args"]["device"], launch["args"]["stream_id"]) == (0, e["args"]["stream"]), (launch, e)
        assert ("s", c) in flows and ("f", c) in flows, e
        assert launch["ts"] <= e["ts"], (launch, e)
        assert e["args"]["device"] == 0 and e["args"]["stream"] == e["tid"], e
        # the launching op: the launch lies inside it, on its thread (work
        # submitted outside any op, as an event record from Python, has none)
        if "External id" not in e["args"]:
            assert "External id" not in launch["args"] and not e["name"].startswith("mtia:aten"), e
            continue
        op = ops[e["args"]["External id"]]
        assert launch["args"]["External id"] == e["args"]["External id"]
        assert op["tid"] == launch["tid"] and op["ts"] <= launch["ts"] <= op["ts"] + op["dur"] + 1, (op, launch)
        if e["name"].startswith("mtia:aten::"):  # a kernel: its op's (or, for a copy's, the copy op's)
            assert op["name"] == e["name"][len("mtia:"):] or op["name"] in ("aten::copy_", "aten::_to_copy"), (op, e)


def test_streams_rows_and_names_are_a_real_mtias(tmp_path):
    trace, _ = step_trace(tmp_path, "mtia:1")
    events = trace["traceEvents"]
    device = [e for e in events if e.get("cat") == "mtia_ccp_events"]
    # no work on a stream numbered 0: the default stream is 1, the others 101 and up
    streams = {e["tid"] for e in device}
    assert 1 in streams and all(s == 1 or s > 100 for s in streams), streams
    # the device's rows: its own index (here 1), named after it
    assert {e["pid"] for e in device} == {1}
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in events if e.get("ph") == "M"}
    assert meta[("process_name", 1, 0)]["name"] == "MTIA 1", meta
    for s in streams:
        assert meta[("thread_name", 1, s)]["name"] == f"Stream {s}"
    # names by kind: copies by direction and pinned or not (memory), waits and
    # event records (synchronization), kernels after their op
    names = {e["name"] for e in device}
    for copy in ("Memcpy HtoD (Pinned -> Device)", "Memcpy DtoD (Device -> Device)",
                 "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pageable)"):
        assert copy in names, names
    assert {"Stream Wait Event Sync", "Event Record Sync", "mtia:aten::mm", "mtia:aten::_foreach_addcdiv_"} <= names, names
    # HTA's patterns (its source, hta/common/types.py): memory "^dma|^Memcpy|^Memset";
    # communication "^nccl|^hccl"; neither compute nor either: "^.*Sync", "^Stream Wait Event"
    memory = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
    not_compute = re.compile(r"(^nccl)|(^hccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)")
    assert {n for n in names if memory.match(n)} == {n for n in names if n.startswith("Memcpy")}
    assert {n for n in names if not not_compute.match(n)} == {n for n in names if n.startswith("mtia:")}
    # every kernel is named after a host op of the trace: none is the host's
    # bookkeeping (a task keeping a copy's pinned buffer alive was "mtia:release")
    ops = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {n for n in names if n.startswith("mtia:") and n[len("mtia:"):] not in ops} == set(), ops
    # and the installed HTA's (0.5.0: no "^Stream Wait Event" yet) computation pattern
    from hta.common.types import ComputeKernelGroupingPattern as hta_compute
    assert hta_compute.inverse_match  # its pattern names what is not computation
    assert {n for n in names if not hta_compute.pattern.match(n)} == {n for n in names if n.startswith("mtia:")}


def test_a_collectives_device_event_is_named_after_mtias_collective_library(tmp_path):
    import torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        t = torch.ones(64, device="mtia")
        dist.all_reduce(t)
        torch.mtia.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as prof:
            dist.all_reduce(t)
            torch.mtia.synchronize()
        path = tmp_path / "trace.json"
        prof.export_chrome_trace(str(path))
        with profile(activities=[ProfilerActivity.CPU]) as cpu_prof:
            torch.ones(2).sum()
        cpu_path = tmp_path / "cpu_trace.json"
        cpu_prof.export_chrome_trace(str(cpu_path))
    finally:
        dist.destroy_process_group()
    trace = json.loads(path.read_text())
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "mtia_ccp_events"}
    assert "hccl:all_reduce" in names, names
    assert not any("c10d" in n for n in names), names
    # the collective's outcome check after the wait is the host's bookkeeping, not device work
    assert names <= {"hccl:all_reduce", "Stream Wait Event Sync", "Event Record Sync"}, names
    # distributedInfo names the backend per device, as a real MTIA's trace
    # ("mtia:hccl,cpu:gloo"), not torch's "undefined" of a default group
    assert trace["distributedInfo"]["backend"] == "cpu:gloo,mtia:openmtia", trace["distributedInfo"]
    # a profile of no mtia work keeps torch's
    assert json.loads(cpu_path.read_text())["distributedInfo"]["backend"] == "undefined"


def test_key_averages_device_time_equals_the_traces_device_events(tmp_path):
    # torch's table and the trace tell one story: each kernel's device time in
    # key_averages() is the sum of its device events' durations in the trace
    trace, prof = step_trace(tmp_path)
    sums = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "mtia_ccp_events":
            sums[e["name"]] = sums.get(e["name"], 0.0) + e["dur"]
    sums = {name: total for name, total in sums.items() if total > 0}  # (a marker of no duration has no row)
    table = {r.key: r.self_device_time_total for r in prof.key_averages() if r.self_device_time_total > 0}
    assert set(table) == set(sums), (set(table) ^ set(sums))
    for name, total in sums.items():
        assert table[name] == pytest.approx(total, abs=0.01 * len(sums) + 1), name


@pytest.mark.parametrize("read", ["item", "cpu"])
def test_a_synchronous_read_is_a_copy_of_the_default_stream_with_its_launch(tmp_path, read):
    # .item() copies synchronously (the driver's memcpy, after a wait): as a
    # GPU's synchronous copy, a device event of the default stream
    t = torch.arange(6.0, device="mtia")
    getattr(t.sum(), read)()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as prof:
        getattr(t.sum(), read)()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    copies = [e for e in events if e.get("cat") == "mtia_ccp_events" and e["name"].startswith("Memcpy DtoH")]
    assert [c["name"] for c in copies] == ["Memcpy DtoH (Device -> Pageable)"], copies
    assert copies[0]["tid"] == 1
    launches = [e for e in events if e.get("cat") == "mtia_runtime"
                and e["args"]["correlation"] == copies[0]["args"]["correlation"]]
    assert len(launches) == 1


def _memory_timeline(device, tmp_path):
    """torch.profiler's memory timeline of two training steps: the sizes by
    category ([PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION,
    GRADIENT, AUTOGRAD_DETAIL, unknown]) at each time, for `device`."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.AdamW(m.parameters())
    x = torch.randn(32, 64, device=device)

    def step():
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.MTIA] if device.startswith("mtia") else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True, with_stack=True) as prof:
        step()
        step()
    path = tmp_path / f"timeline_{device}.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch marks export_memory_timeline deprecated, for CUDA's snapshots)
        prof.export_memory_timeline(str(path), device=device)
    _, sizes = json.loads(path.read_text())
    return [row[1:] for row in sizes]  # (column 0 is unused)


def test_memory_timeline_of_mtia_memory_by_category_as_cpus(tmp_path):
    PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT = range(6)
    params = (64 * 64 + 64 + 64 * 8 + 8) * 4
    mtia = _memory_timeline("mtia:0", tmp_path)
    cpu = _memory_timeline("cpu", tmp_path)
    assert len(mtia) > 10
    # after the steps: the parameters, AdamW's two moments and the input, as on
    # CPU (whose optimizer state also holds AdamW's step counters, CPU tensors
    # of 4 bytes each, which on mtia stay on the CPU)
    assert mtia[-1][:3] == [params, 2 * params, 32 * 64 * 4], mtia[-1]
    assert cpu[-1][:3] == [params, 2 * params + 4 * 4, 32 * 64 * 4], cpu[-1]
    # during them: activations and gradients (the device's blocks, in 512 bytes)
    assert max(r[ACTIVATION] for r in mtia) > 0
    assert params <= max(r[GRADIENT] for r in mtia) <= params + 4 * 512, max(r[GRADIENT] for r in mtia)


def test_python_stacks_carry_mtia_device_time(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).to("mtia")
    x = torch.randn(32, 64, device="mtia")

    def forward_here():
        return m(x).sum()
    forward_here().item()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA], with_stack=True,
                 experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True)) as prof:  # (as torch's docs ask)
        forward_here().item()
    # the flame graph's device-time metric (torch names it after CUDA and
    # reads every device's time under it: there is no mtia name)
    path = tmp_path / "stacks.txt"
    prof.export_stacks(str(path), "self_cuda_time_total")
    lines = path.read_text().splitlines()
    linear = [line for line in lines if "forward_here" in line and "linear.py" in line]
    assert linear and all(int(line.rsplit(" ", 1)[1]) > 0 for line in linear), "\n".join(lines)
    rows = [r for r in prof.key_averages(group_by_stack_n=4) if r.key == "mtia:aten::addmm"]
    assert rows and rows[0].self_device_time_total > 0
    assert any("linear.py" in frame for frame in rows[0].stack), rows[0].stack


# ---------------------------------------------------------------- bad input

A_MTIA = [ProfilerActivity.CPU, ProfilerActivity.MTIA]


def test_a_profile_stopped_in_another_thread_raises_and_stops_in_its_own(tmp_path):
    # torch keeps the session in the starting thread: stopped elsewhere it
    # found none and the export crashed the process (CPU PyTorch's too)
    x = torch.ones(1000, device="mtia")
    started, stop = threading.Event(), threading.Event()
    prof = profile(activities=A_MTIA)

    def owner():
        prof.start()
        started.set()
        stop.wait(60)
        prof.stop()
    t = threading.Thread(target=owner)
    t.start()
    started.wait(60)
    (x * 5).sum().item()
    with pytest.raises(RuntimeError, match="started in thread .* stop it there"):
        prof.stop()
    stop.set()
    t.join(60)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "mtia_ccp_events"}
    assert "mtia:aten::mul" in names, names
    assert (x * 2).sum().item() == 2000


@pytest.mark.needs_async
def test_a_profile_ends_once_a_stream_blocked_on_an_event_is_released(tmp_path):
    # the profile's end synchronizes the device, as CUDA's does: it waits for
    # the released stream, and the trace holds the wait and the work after it
    from openmtia import _C_test
    x = torch.ones(1000, device="mtia")
    ready = torch.mtia.Event()
    gate = _C_test.launch_blocking_task(0, 30.0)
    ready.record()
    side = torch.mtia.Stream()
    threading.Timer(0.5, gate.release).start()
    with profile(activities=A_MTIA) as prof:
        with torch.mtia.stream(side):
            side.wait_event(ready)
            y = x * 5
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "mtia_ccp_events"]
    # (the event's record, launched before the profile, ran during it)
    assert sorted(names) == ["Event Record Sync", "Stream Wait Event Sync", "mtia:aten::mul"], names
    assert y.sum().item() == 5000


@pytest.mark.needs_async
def test_a_device_error_at_the_profiles_end_raises_and_the_next_profile_works(tmp_path):
    from openmtia import _C_test
    x = torch.ones(1000, device="mtia")
    _C_test.launch_blocking_task(0, 0.5)  # never released: its task fails
    with pytest.raises(RuntimeError, match="asynchronous task 'test_gate' failed"):
        with profile(activities=A_MTIA):
            x * 5
    with profile(activities=A_MTIA) as prof:
        total = (x * 6).sum().item()
    assert total == 6000
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "mtia_ccp_events"}
    assert {"mtia:aten::mul", "mtia:aten::sum"} <= names, names


def test_a_failed_task_is_in_the_trace_with_its_error(tmp_path):
    from openmtia import _C_test
    with profile(activities=A_MTIA) as prof:
        _C_test.launch_failing_task(0, "broken_kernel", 'failed "on purpose"')
        with pytest.raises(RuntimeError, match="broken_kernel"):
            torch.mtia.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    failed = [e for e in events if e.get("cat") == "mtia_ccp_events" and e["name"] == "mtia:broken_kernel"]
    # (the message as JSON holds it through Kineto: its double quotes single)
    assert len(failed) == 1 and failed[0]["args"]["error"] == "failed 'on purpose'", failed
    launches = [e for e in events if e.get("cat") == "mtia_runtime"
                and e["args"]["correlation"] == failed[0]["args"]["correlation"]]
    assert [e["name"] for e in launches] == [LAUNCH_NAME]
    assert (torch.ones(3, device="mtia") * 2).sum().item() == 6


def test_a_profile_in_a_forked_child(tmp_path):
    # a child forked after the parent used mtia: a profile of mtia raises as
    # any mtia call there does; a CPU profile works; the parent goes on
    code = textwrap.dedent("""
        import os, torch
        from torch.profiler import profile, ProfilerActivity
        x = torch.ones(8, device="mtia")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]):
            (x * 2).sum().item()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            out = []
            try:
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]):
                    torch.ones(3).sum()
                out.append("mtia profile: no error")
            except RuntimeError as e:
                out.append("mtia profile: " + str(e).split(".")[0])
            with profile(activities=[ProfilerActivity.CPU]) as p:
                torch.ones(3).sum()
            out.append("cpu profile: " + str(any(e.name == "aten::sum" for e in p.events())))
            os.write(w, "|".join(out).encode())
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        print(os.read(r, 4096).decode())
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as p:
            print("parent", (x * 3).sum().item(), status)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    child, parent = [line for line in out.stdout.splitlines() if line.startswith(("mtia profile", "parent"))]
    assert child.split("|") == ["mtia profile: Cannot re-initialize MTIA in forked subprocess", "cpu profile: True"], child
    assert parent == "parent 24.0 0"


def test_work_of_threads_that_ended_is_in_the_trace_and_the_next_profile_has_its_own_only(tmp_path):
    # each launching thread records into a buffer of its own: a thread that
    # ends before the profile does leaves its work in the trace, and the next
    # profile (on the same threads' buffers) holds none of the last one's
    x = torch.ones(64, device="mtia")

    def work(op, n):
        for _ in range(n):
            op(x, 1)

    def trace(name):
        path = str(tmp_path / name)
        p.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
        device = [e for e in events if e.get("cat") == "mtia_ccp_events"]
        launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "mtia_runtime"}
        return device, launches

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as p:
        tids = []
        for _ in range(3):
            t = threading.Thread(target=work, args=(torch.add, 5))
            t.start()
            t.join()
            tids.append(t.native_id)
        work(torch.add, 2)
        torch.mtia.synchronize()
    device, launches = trace("first.json")
    adds = [e for e in device if e["name"] == "mtia:aten::add"]
    assert len(adds) == 17, [e["name"] for e in device]
    by_thread = {}
    for e in adds:
        tid = launches[e["args"]["correlation"]]["tid"]
        by_thread[tid] = by_thread.get(tid, 0) + 1
    assert by_thread == {**{t: 5 for t in tids}, threading.get_native_id(): 2}, by_thread
    assert [e["ts"] for e in device] == sorted(e["ts"] for e in device)  # in the order the work ran

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as p:
        t = threading.Thread(target=work, args=(torch.mul, 3))  # (a thread may take an ended one's buffer)
        t.start()
        t.join()
        torch.mtia.synchronize()
    device, launches = trace("second.json")
    assert sorted(e["name"] for e in device) == ["mtia:aten::mul"] * 3, [e["name"] for e in device]
    assert all(launches[e["args"]["correlation"]]["tid"] == t.native_id for e in device)
