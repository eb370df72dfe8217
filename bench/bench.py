"""mtia vs CPU PyTorch: prints a table of ratios.

The CPU and the mtia runs of a case run in two child processes, one per
device, case after case (so drift of a shared machine hits both alike), as a
program runs on one device or the other: in one process each side's OpenMP
threads changed the other's (a CPU kernel's team on the host thread makes
the device's threads sleep between parallel regions, and a team spinning
after one side's run took a core from the other: the MLP step read 0.76x).
A process tends to run all its cases at one of two speeds (CPU PyTorch
too): each device runs in three processes (--processes), each case's time
the median over them of each process's median. Ratios are those of these
times; mtia is
synchronized before each timer stops. Ratios: latency ratio = mtia time / CPU time (lower is
better; the target as the row says); throughput ratio = CPU time / mtia time (higher is
better, target >= 0.9). The single-op latency row (launch, then synchronize,
per op) has no target: it shows what one round trip to the device costs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import host_memory  # bench/host_memory.py


def run_once(fn, sync, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - t0) / inner




class DeviceProcess:
    """A child process that times CASES on one device, case by case (its
    requests on stdin, its times as JSON lines on stdout)."""

    def __init__(self, device):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def wait_ready(self):
        # (the children start together: the first case is timed only once
        # no other one is still importing torch on the same cores)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a bench process did not start (exit code {self.proc.wait()})")

    def times(self, index, repeats, inner):
        self.proc.stdin.write(json.dumps([index, repeats, inner]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the bench's {CASES[index][0]!r} process ended (exit code {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# calls of a case before it is timed: its plans, allocations and lazy starts,
# and the threads the fallback learns per kernel (a new signature's first
# call, a warm-up, then 3 timed calls on every thread and 3 on one:
# csrc/aten/threads/learned_threads.cpp)
WARMUP = 9


def serve(device):
    """--serve: the child side of DeviceProcess. A request [index, repeats,
    inner] times `repeats` runs of CASES[index]; the case is made and warmed
    up at its first request and kept for the next ones."""
    torch.empty(1, device=device)  # the device's lazy start, before the parent's first request
    print("ready", flush=True)
    current, fns = None, None
    for line in sys.stdin:
        index, repeats, inner = json.loads(line)
        if index != current:
            current, fns = index, {device: (CASES[index][1](device), on(device))}
            alternating(fns, 0, inner)  # (warm-up only)
        t = alternating(fns, repeats, inner, warmup=0)[device]
        print(json.dumps(t), flush=True)


QUIET = 0.05  # seconds between two turns (paired())


def paired(pairs, index, repeats, inner):
    """(cpu time, mtia time) of CASES[index]: each device in its processes
    (one per pair), the median over the processes of each one's median. A
    process runs all its cases in one of two speeds (a 200-shape loop read 70
    or 93 ms on CPU PyTorch in a process of its own, run after run): one
    process per device made a ratio of 0.80 one run and 1.33 the next. The
    processes take turns repeat by repeat: the development VM's single thread
    runs at one of two speeds for seconds at a time (an add of one element in
    CPU PyTorch 1.15 or 2.0 us, alone on the machine), and a case's repeats run
    back to back in one process then the other put a whole slow stretch on one
    device (the tiny-op rows read 1.8x, then 1.2x minutes later). Each turn
    starts QUIET seconds after the last one ended: an OpenMP team's idle
    threads spin for their next region up to ~15 ms after a run (libgomp's
    default while a process has no more OpenMP threads than cores), on a
    core the next turn, in another process, needed (the table-batched
    lookup, 3 calls a turn, read 3.67 ms on mtia after CPU PyTorch's turns,
    2.73 ms with the pause; CPU's 2.09 and 2.15)."""
    times = [{d: [] for d in ("cpu", "mtia")} for _ in pairs]
    for _ in range(repeats):
        for procs, t in zip(pairs, times):
            for d in ("cpu", "mtia"):
                time.sleep(QUIET)
                t[d] += procs[d].times(index, 1, inner)
    return tuple(statistics.median(statistics.median(t[d]) for t in times) for d in ("cpu", "mtia"))


def on(device):
    return (lambda: torch.mtia.synchronize()) if device == "mtia" else (lambda: None)


def tiny_add(device):
    x = torch.ones(1, device=device)
    return lambda: x + x


def tiny_add_synchronized(device):
    """One op's true latency: launch, then wait for its result (per op)."""
    x = torch.ones(1, device=device)
    sync = on(device)

    def f():
        x + x
        sync()
    return f


def chain10(device):
    x = torch.randn(64, device=device)

    def f():
        y = x * 2
        y = y + 1
        y = torch.relu(y)
        y = y - x
        y = y.exp()
        y = y * 0.5
        y = y.sqrt()
        y = y + x
        y = y.abs()
        return y.neg()
    return f


def big_add(device):
    # into a preallocated output on both sides: the row measures the add, not
    # CPU's page faults on a fresh 64 MB result against mtia's cached block
    a = torch.randn(16 << 20, device=device)
    b = torch.randn(16 << 20, device=device)
    out = torch.empty_like(a)
    return lambda: torch.add(a, b, out=out)


def medium_ops(device):
    # ops of 1M elements, between the latency-bound and the bandwidth-bound
    # rows: where the worker's thread team costs most (kernel_threads.cpp)
    x = torch.randn(1 << 20, device=device)
    out = torch.empty_like(x)
    return lambda: (torch.mul(x, 1.0001, out=out), out.sum(), torch.softmax(x.view(1024, 1024), -1))


def matmul(device):
    a = torch.randn(1024, 1024, device=device)
    b = torch.randn(1024, 1024, device=device)
    return lambda: a @ b


def train_step(model_fn, input_fn):
    def make(device):
        torch.manual_seed(0)
        model = model_fn().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = input_fn(device)

        def step():
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return step
    return make


mlp = train_step(
    lambda: torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(512, 512), torch.nn.ReLU())]),
    lambda d: (torch.randn(256, 512, device=d), torch.randn(256, 512, device=d)))

transformer = train_step(
    lambda: torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True), num_layers=4,
        enable_nested_tensor=False),
    lambda d: (torch.randn(8, 128, 256, device=d), torch.randn(8, 128, 256, device=d)))

def new_shapes(device):
    """matmul + gelu over 200 shapes never seen before (each call new ones):
    every call is a new signature (issue 18's point 2)."""
    seen = [0]

    def f():
        base = seen[0]
        seen[0] += 200
        for i in range(200):
            a = torch.randn(16 + base + i, 64, device=device)
            b = torch.randn(64, 48, device=device)
            torch.nn.functional.gelu(a @ b)
    return f


def table_batched_lookup(device):
    """FBGEMM's table-batched embedding bag (TorchRec's sharded tables run
    it): forward and backward with the fused EXACT_ROWWISE_ADAGRAD update,
    4 tables of 50,000 x 64, batches of 512 with 1-20 ids per bag; every call
    a batch of a new size (its ids' count), made on the host and copied in as
    a data loader's for an accelerator would be: from pinned memory, without
    blocking, as TorchRec's TrainPipelineSparseDist copies its batches (a
    blocking copy from pageable memory waits for the stream, as CUDA's does:
    each call then waited for the last one's backward, a latency rather than
    a throughput) (issue 42's point 3: no synchronous first call per batch
    shape)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

    tables, batch = [(50_000, 64)] * 4, 512
    compute = ComputeDevice.MTIA if device == "mtia" else ComputeDevice.CPU
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, EmbeddingLocation.HOST, compute) for rows, dim in tables],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.05, pooling_mode=PoolingMode.SUM,
        device=device)
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(64):
        lengths = torch.randint(1, 21, (len(tables) * batch,), generator=g)
        indices = torch.randint(0, tables[0][0], (int(lengths.sum()),), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        if device != "cpu":
            indices, offsets = indices.pin_memory(), offsets.pin_memory()
        batches.append((indices, offsets))
    turn = [0]

    def f():
        indices, offsets = batches[turn[0] % len(batches)]
        turn[0] += 1
        out = tbe(indices.to(device, non_blocking=True), offsets.to(device, non_blocking=True))
        out.sum().backward()
    return f


def first_big_matmul(repeats):
    """The first a @ b of a never-seen 2048x2048 shape (matmul has run at other
    shapes): the fraction of its run time after which the call returns, the
    median over `repeats` new shapes. A device that runs a new shape's first
    call synchronously returns after all of it (1.0); target < 0.1."""
    (torch.randn(8, 8, device="mtia") @ torch.randn(8, 8, device="mtia")).cpu()
    fractions = []
    for k in range(repeats):
        n = 2048 + 1 + k  # never seen before
        a, b = torch.randn(n, n, device="mtia"), torch.randn(n, n, device="mtia")
        torch.mtia.synchronize()
        t0 = time.perf_counter()
        a @ b
        t1 = time.perf_counter()
        torch.mtia.synchronize()
        fractions.append((t1 - t0) / (time.perf_counter() - t0))
    return statistics.median(fractions)


CASES = [
    # name, factory, kind, inner iterations, target
    ("add, 1 element (latency per op)", tiny_add, "latency", 2000, 1.2),
    ("add, 1 element, synchronized per op (single-op latency)", tiny_add_synchronized, "latency", 2000, None),
    ("10-op chain, 64 elements (latency per chain)", chain10, "latency", 300, 1.2),
    ("add, 16M elements (throughput)", big_add, "throughput", 3, 0.9),
    ("mul, sum, softmax of 1M elements (throughput)", medium_ops, "throughput", 20, None),
    ("matmul 1024^3 float32 (throughput)", matmul, "throughput", 3, 0.9),
    ("4-layer MLP train step, AdamW", mlp, "throughput", 3, 0.9),
    ("transformer 4x256, seq 128, batch 8, train step", transformer, "throughput", 1, 0.9),
    ("matmul + gelu, 200 never-seen shapes", new_shapes, "latency", 1, 1.1),
    ("table-batched lookup fwd+bwd, new batch shapes", table_batched_lookup, "throughput", 3, 1.0),
]


# ---- bf16/fp16 on mtia against float32 on mtia (issue 18): an accelerator's
# low precision is never slower than its float32. Each factory takes
# (device, dtype); float32 is the baseline.
def lp_mm(device, dtype):
    a, b = torch.randn(256, 512, device=device, dtype=dtype), torch.randn(512, 512, device=device, dtype=dtype)
    return lambda: a @ b


def lp_bmm(device, dtype):
    a, b = torch.randn(16, 128, 64, device=device, dtype=dtype), torch.randn(16, 64, 128, device=device, dtype=dtype)
    return lambda: torch.bmm(a, b)


def lp_conv2d(device, dtype):
    x = torch.randn(8, 16, 32, 32, device=device, dtype=dtype)
    w = torch.randn(32, 16, 3, 3, device=device, dtype=dtype)
    return lambda: torch.nn.functional.conv2d(x, w, padding=1)


def lp_linear_step(device, dtype):
    """A 2-layer MLP training step: float32, or under autocast to dtype."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 512, device=device), torch.randn(256, 512, device=device)

    def step():
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def lp_gelu(device, dtype):
    x = torch.randn(1 << 20, device=device, dtype=dtype)
    return lambda: torch.nn.functional.gelu(x)


def lp_gelu_backward(device, dtype):
    g, x = (torch.randn(1 << 20, device=device, dtype=dtype) for _ in range(2))
    return lambda: torch.ops.aten.gelu_backward(g, x)


def lp_silu(device, dtype):
    x = torch.randn(1 << 20, device=device, dtype=dtype)
    return lambda: torch.nn.functional.silu(x)


def lp_layer_norm(device, dtype):
    """layer_norm forward and backward (input, weight and bias gradients)."""
    x = torch.randn(1024, 1024, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(1024, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(1024, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(1024, 1024, device=device, dtype=dtype)
    return lambda: torch.autograd.grad(torch.nn.functional.layer_norm(x, (1024,), w, b), (x, w, b), g)


def lp_rms_norm(device, dtype):
    """rms_norm forward and backward (input and weight gradients)."""
    x = torch.randn(1024, 1024, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(1024, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(1024, 1024, device=device, dtype=dtype)
    return lambda: torch.autograd.grad(torch.nn.functional.rms_norm(x, (1024,), w), (x, w), g)


def lp_attention(device, dtype):
    """Causal scaled_dot_product_attention forward and backward."""
    q, k, v = (torch.randn(4, 4, 256, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    g = torch.randn(4, 4, 256, 64, device=device, dtype=dtype)
    return lambda: torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                                       (q, k, v), g)


def lp_add(device, dtype):
    a, b = (torch.randn(1 << 20, device=device, dtype=dtype) for _ in range(2))
    return lambda: a + b


def lp_compare(device, dtype):
    a, b = (torch.randn(1 << 20, device=device, dtype=dtype) for _ in range(2))
    return lambda: a > b


def lp_mean(device, dtype):
    x = torch.randn(1 << 20, device=device, dtype=dtype)
    return lambda: x.mean()


LOW_PRECISION_CASES = [
    # name, factory, low dtypes, inner iterations
    ("mm 256x512 @ 512x512", lp_mm, (torch.bfloat16, torch.float16), 5),
    ("bmm 16 x 128x64 @ 64x128", lp_bmm, (torch.bfloat16, torch.float16), 5),
    ("conv2d 8x16x32x32, 32 3x3 filters", lp_conv2d, (torch.bfloat16, torch.float16), 5),
    ("MLP train step, autocast", lp_linear_step, (torch.bfloat16, torch.float16), 2),
    ("gelu, 1M elements", lp_gelu, (torch.bfloat16, torch.float16), 5),
    ("gelu backward, 1M elements", lp_gelu_backward, (torch.bfloat16, torch.float16), 5),
    ("silu, 1M elements", lp_silu, (torch.bfloat16, torch.float16), 5),
    ("layer_norm fwd+bwd, 1024x1024", lp_layer_norm, (torch.bfloat16, torch.float16), 5),
    ("rms_norm fwd+bwd, 1024x1024", lp_rms_norm, (torch.bfloat16, torch.float16), 5),
    ("causal attention fwd+bwd, 4x4x256x64", lp_attention, (torch.bfloat16, torch.float16), 2),
    ("add, 1M elements", lp_add, (torch.bfloat16, torch.float16), 5),
    ("x > y, 1M elements", lp_compare, (torch.bfloat16, torch.float16), 5),
    ("mean, 1M elements", lp_mean, (torch.bfloat16, torch.float16), 5),
]
LOW_PRECISION_TARGET = 1.1  # mtia low-precision time / mtia float32 time


def alternating(fns, repeats, inner, warmup=WARMUP, settle=0.0):
    """Per-repeat times of each of fns (name -> (fn, sync)), run in turns
    after `warmup` calls of each (plans, allocations, compiles, lazy init).
    settle: seconds of idle before each turn, so that the OpenMP teams of the
    previous turn have stopped spinning (they take a core from the next one:
    the main job's GPT packages for CPU and mtia, run in turns without it, each
    read 1.3-1.7x slower than with 50 ms)."""
    for fn, sync in fns.values():
        for _ in range(warmup):
            fn()
        sync()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, (fn, sync) in fns.items():
            if settle:
                time.sleep(settle)
            times[name].append(run_once(fn, sync, inner))
    return times


def low_precision_times(repeats, quick):
    """Per case and dtype of LOW_PRECISION_CASES: the median times (mtia
    float32, mtia low precision, CPU low precision), in this process."""
    out = []
    for name, factory, dtypes, inner in LOW_PRECISION_CASES:
        inner = max(1, inner // 2) if quick else inner
        for dtype in dtypes:
            # the two mtia runs alternate with each other only: a CPU kernel's
            # OpenMP team spinning after it slowed the next mtia run (gelu's
            # float32 time read 0.32-0.57 ms against 0.14 alone); CPU after
            fns = {"f32": (factory("mtia", torch.float32), on("mtia")),
                   "low": (factory("mtia", dtype), on("mtia"))}
            t = {k: statistics.median(v) for k, v in alternating(fns, repeats, inner).items()}
            cpu = {"cpu": (factory("cpu", dtype), on("cpu"))}
            t["cpu"] = statistics.median(alternating(cpu, repeats, inner)["cpu"])
            out.append((t["f32"], t["low"], t["cpu"]))
    return out


def low_precision_table(repeats, quick, processes):
    """Each process's times (low_precision_times, in `processes` processes of
    their own, one after the other), the median over them: a process runs
    its cases at one of two speeds (the mm row read 1.18-1.21 in two
    single-process runs on the AVX2 host, 1.05-1.08 in others)."""
    import openmtia
    paths = {str(d).replace("torch.", ""): openmtia._C._low_precision_path(d) for d in (torch.bfloat16, torch.float16)}
    act = {str(d).replace("torch.", ""): [openmtia._C._activation_path(d, g) for g in (True, False)]
           for d in (torch.bfloat16, torch.float16)}
    print(f"\nbf16/fp16 on mtia against float32 on mtia (target: <= {LOW_PRECISION_TARGET}); "
          f"matrix-op paths here: {paths}, activation paths [gelu, others]: {act} "
          f"(fused kernel: {openmtia._C._activation_isa()}) "
          f"(OPENMTIA_LOW_PRECISION={openmtia._C._low_precision_mode()}); "
          f"median of {processes} processes; last column: mtia over CPU PyTorch in the same dtype\n")
    print(f"| {'case':36} | {'dtype':8} | {'mtia f32':>10} | {'mtia low':>10} | {'ratio':>6} | met | {'cpu low':>10} | vs cpu |")
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 12}|{'-' * 12}|{'-' * 8}|-----|{'-' * 12}|--------|")
    if processes <= 1:
        runs = [low_precision_times(repeats, quick)]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--low-precision-times", str(repeats)] + (["--quick"] if quick else [])
        runs = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
                for _ in range(processes)]
    rows = []
    index = 0
    for name, factory, dtypes, inner in LOW_PRECISION_CASES:
        for dtype in dtypes:
            f32, low, cpu = (statistics.median(run[index][k] for run in runs) for k in range(3))
            index += 1
            ratio = low / f32
            ok = ratio <= LOW_PRECISION_TARGET
            short = str(dtype).replace("torch.", "")
            print(f"| {name:36} | {short:8} | {f32 * 1e3:8.2f}ms | {low * 1e3:8.2f}ms | {ratio:6.2f} | "
                  f"{'yes' if ok else 'NO':3} | {cpu * 1e3:8.2f}ms | {low / cpu:6.2f} |")
            rows.append((f"{name} ({short} / float32)", f32, low, ok))
    return rows


def omp_interference(repeats, inner=5):
    """CPU matmul time right after an mtia matmul (the worker's OpenMP team
    just ran) over its time after another CPU matmul: 1.0 means the device's
    threads do not slow the CPU runs the ratios alternate with."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    ma, mb = a.to("mtia"), b.to("mtia")
    cpu_fn, mtia_fn = (lambda: a @ b), (lambda: ma @ mb)
    for fn in (cpu_fn, mtia_fn):
        fn()
    torch.mtia.synchronize()
    after_cpu, after_mtia = [], []
    for _ in range(repeats):
        run_once(cpu_fn, on("cpu"), inner)
        after_cpu.append(run_once(cpu_fn, on("cpu"), inner))
        run_once(mtia_fn, on("mtia"), inner)
        after_mtia.append(run_once(cpu_fn, on("cpu"), inner))
    return statistics.median(m / c for c, m in zip(after_cpu, after_mtia))


def cpu_table(repeats, quick, processes, only=""):
    print(f"| {'case':50} | {'cpu':>10} | {'mtia':>10} | {'ratio':>6} | target | met |")
    print(f"|{'-' * 52}|{'-' * 12}|{'-' * 12}|{'-' * 8}|--------|-----|")
    rows = []
    pairs = [{d: DeviceProcess(d) for d in ("cpu", "mtia")} for _ in range(processes)]
    for procs in pairs:
        for proc in procs.values():
            proc.wait_ready()
    for index, (name, factory, kind, inner, target) in enumerate(CASES):
        if only and only not in name:
            continue
        inner = max(1, inner // 4) if quick else inner
        t_cpu, t_mtia = paired(pairs, index, repeats, inner)
        if kind == "latency":
            ratio = t_mtia / t_cpu
            ok, fmt = (None, "-") if target is None else (ratio <= target, f"<= {target}")
        else:
            ratio = t_cpu / t_mtia
            ok, fmt = (None, "-") if target is None else (ratio >= target, f">= {target}")
        unit = (lambda t: f"{t * 1e6:8.1f}us") if t_cpu < 1e-3 else (lambda t: f"{t * 1e3:8.2f}ms")
        met = "-" if ok is None else "yes" if ok else "NO"
        print(f"| {name:50} | {unit(t_cpu):>10} | {unit(t_mtia):>10} | {ratio:6.2f} | {fmt:6} | {met:3} |")
        rows.append((name, t_cpu, t_mtia, ok))
    for procs in pairs:
        for proc in procs.values():
            proc.close()
    if not only:  # (the table's own rows only)
        first = first_big_matmul(repeats)
        print(f"\nfirst 2048x2048 matmul of a new shape: the call returns after {first:.1%} of its run time "
              f"(target < 10%: {'met' if first < 0.1 else 'NOT met'})")
        slow = omp_interference(repeats)
        print(f"\nCPU matmul right after an mtia one / after a CPU one: {slow:.2f} "
              f"(the worker's OpenMP team {'does not slow' if slow <= 1.1 else 'SLOWS'} the CPU runs; target <= 1.1)")
    return rows


def memory_table():
    print("\nhost memory: RSS growth of each workload in a fresh process (bench/host_memory.py); "
          "target: mtia <= 2 x CPU + 64 MiB\n")
    print(f"| {'workload':20} | {'cpu MiB':>8} | {'mtia MiB':>8} | {'bound':>8} | met |")
    print(f"|{'-' * 22}|{'-' * 10}|{'-' * 10}|{'-' * 10}|-----|")
    mem_rows = []
    for name in host_memory.WORKLOADS:
        cpu, mtia = host_memory.in_subprocess(name, "cpu"), host_memory.in_subprocess(name, "mtia")
        ok = mtia <= host_memory.bound(cpu)
        print(f"| {name:20} | {cpu:8.1f} | {mtia:8.1f} | {host_memory.bound(cpu):8.1f} | {'yes' if ok else 'NO':3} |")
        mem_rows.append((name, cpu, mtia, ok))
    return mem_rows


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="fewer repeats, one process per device (smoke run)")
    p.add_argument("--processes", type=int, default=3,
                   help="processes per device (mtia-vs-CPU table) and per run of the low-precision table "
                        "(the median over them)")
    p.add_argument("--no-memory", action="store_true", help="skip the host memory table")
    p.add_argument("--cases", default="", help="only the mtia-vs-CPU rows whose name contains this")
    p.add_argument("--tables", default="cpu,low-precision,memory",
                   help="which tables: cpu (mtia vs CPU), low-precision (bf16/fp16 vs float32 on mtia), memory")
    p.add_argument("--png", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench.png"),
                   help="where the bar chart goes ('' for none)")
    p.add_argument("--serve", metavar="DEVICE", help=argparse.SUPPRESS)  # a DeviceProcess child
    p.add_argument("--low-precision-times", type=int, metavar="REPEATS", help=argparse.SUPPRESS)  # a child
    args = p.parse_args()
    if args.serve:
        return serve(args.serve)
    if args.low_precision_times:
        return print(json.dumps(low_precision_times(args.low_precision_times, args.quick)), flush=True)
    repeats = 2 if args.quick else args.repeats
    tables = set(args.tables.split(","))
    if args.no_memory:
        tables.discard("memory")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, median of {repeats} runs\n")
    rows = []
    if "cpu" in tables:
        rows += cpu_table(repeats, args.quick, 1 if args.quick else args.processes, args.cases)
    if "low-precision" in tables:
        rows += low_precision_table(repeats, args.quick, 1 if args.quick else args.processes)
    mem_rows = memory_table() if "memory" in tables else []
    if args.png and rows:
        write_chart(rows, mem_rows, args.png, repeats)
        print(f"\nchart: {args.png}")


def write_chart(rows, mem_rows, path, repeats):
    """The tables as bar charts: per case, mtia's time next to its baseline's
    (= 1: CPU PyTorch, or float32 on mtia for the bf16/fp16 rows); per
    workload, the host RSS growth of both."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r[0] for r in rows]
    rel = [r[2] / r[1] for r in rows]
    if mem_rows:
        fig, (ax, mx) = plt.subplots(2, 1, figsize=(9, 0.6 * (len(rows) + len(mem_rows)) + 3.2),
                                     gridspec_kw={"height_ratios": [len(rows), len(mem_rows)]})
        my = range(len(mem_rows))
        mx.barh([i + 0.2 for i in my], [r[1] for r in mem_rows], height=0.4, color="#9e9e9e", label="cpu")
        mx.barh([i - 0.2 for i in my], [r[2] for r in mem_rows], height=0.4,
                color=["#2e7d32" if r[3] else "#c62828" for r in mem_rows],
                label="mtia (green: within 2 x cpu + 64 MiB)")
        for i, r in enumerate(mem_rows):
            mx.text(r[2] + 2, i - 0.2, f"{r[2]:.0f} MiB vs {r[1]:.0f} MiB", va="center", fontsize=8)
        mx.set_yticks(list(my))
        mx.set_yticklabels([r[0] for r in mem_rows], fontsize=8)
        mx.invert_yaxis()
        mx.set_xlabel("host RSS growth (MiB), each workload in a fresh process")
        mx.set_xlim(0, max(max(r[1], r[2]) for r in mem_rows) * 1.45)
        mx.legend(loc="lower right", fontsize=8)
    else:
        fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [1.0] * len(rows), height=0.4, color="#9e9e9e", label="baseline (= 1): CPU, or mtia float32 for bf16/fp16")
    ax.barh([i - 0.2 for i in y], rel, height=0.4,
            color=["#1565c0" if r[3] is None else "#2e7d32" if r[3] else "#c62828" for r in rows],
            label="mtia (green: target met, red: not, blue: no target)")
    for i, (r, row) in enumerate(zip(rel, rows)):
        ax.text(r + 0.02, i - 0.2, f"{r:.2f}x  ({row[2] * 1e3:.3g} ms vs {row[1] * 1e3:.3g} ms)", va="center",
                fontsize=8)
    ax.set_yticks(list(y))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time relative to the baseline (lower is faster)")
    ax.set_title(f"openmtia vs CPU PyTorch {torch.__version__}, median of {repeats} runs", fontsize=10)
    ax.set_xlim(0, max(max(rel), 1.0) * 1.45)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
