"""Per-rank bodies of the torch.distributed tests (tests/test_distributed.py).

Each runs in its own process, one rank per mtia device, over loopback (or the
test's network namespaces). A failed check raises, which fails the rank and the
test.
"""
import copy
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init(rank, world, port, timeout_s=60, addr="127.0.0.1"):
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    torch.mtia.set_device(rank % torch.mtia.device_count())
    dist.init_process_group(rank=rank, world_size=world, device_id=torch.device("mtia", rank % torch.mtia.device_count()),
                            timeout=datetime.timedelta(seconds=timeout_s))
    return torch.device("mtia", rank % torch.mtia.device_count())


def outcome_of(f):
    """What `f()` raised, as "Type: first line of its message" (the test
    checks it), or "no error"."""
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return "no error"


def close_equal(a, b, what, atol=0.0):
    a, b = a.detach().cpu(), b.detach().cpu()
    if not torch.allclose(a, b, atol=atol, rtol=0):
        raise AssertionError(f"{what}: {a.tolist()} != {b.tolist()}")


# ---------------------------------------------------------------- collectives
def collectives(rank, world, port):
    dev = init(rank, world, port)
    backend = dist.group.WORLD._get_backend(dev)
    assert dist.get_backend() == "openmtia" and "openmtia" in repr(dist.get_backend_config()), dist.get_backend_config()

    def full(v, n=4, dtype=torch.float32):
        return torch.full((n,), v, device=dev, dtype=dtype)

    # all_reduce, every ReduceOp
    vals = [float(r + 2) for r in range(world)]
    expect = {
        dist.ReduceOp.SUM: sum(vals), dist.ReduceOp.AVG: sum(vals) / world,
        dist.ReduceOp.PRODUCT: vals[0] * vals[1], dist.ReduceOp.MIN: min(vals), dist.ReduceOp.MAX: max(vals),
    }
    for op, e in expect.items():
        t = full(vals[rank])
        dist.all_reduce(t, op=op)
        close_equal(t, torch.full((4,), e), f"all_reduce {op}")
    t = full(vals[rank])
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(3.0))
    close_equal(t, torch.full((4,), 3.0 * sum(vals)), "all_reduce PREMUL_SUM")
    bits = [0b1100, 0b1010]
    for op, e in [(dist.ReduceOp.BAND, 0b1000), (dist.ReduceOp.BOR, 0b1110), (dist.ReduceOp.BXOR, 0b0110)]:
        t = full(bits[rank], dtype=torch.int32)
        dist.all_reduce(t, op=op)
        assert t.cpu().tolist() == [e] * 4, (op, t.cpu().tolist())
    for dtype in (torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.uint8):
        t = full(rank + 1, dtype=dtype)
        dist.all_reduce(t)
        assert t.dtype == dtype and t.cpu().tolist() == [3] * 4, (dtype, t.cpu().tolist())
    # small tensors (up to 64 KiB) reduce in one exchange, larger ones through Gloo's all_reduce: both equal CPU
    for n, op in [(16383, dist.ReduceOp.SUM), (16385, dist.ReduceOp.SUM), (16384, dist.ReduceOp.MAX),
                  (40000, dist.ReduceOp.MIN), (3, dist.ReduceOp.PRODUCT)]:
        parts = [torch.randn(n, generator=torch.Generator().manual_seed(r)) for r in range(world)]
        t = parts[rank].to(dev)
        dist.all_reduce(t, op=op)
        ref = {dist.ReduceOp.SUM: lambda: parts[0] + parts[1], dist.ReduceOp.MAX: lambda: torch.maximum(*parts),
               dist.ReduceOp.MIN: lambda: torch.minimum(*parts), dist.ReduceOp.PRODUCT: lambda: parts[0] * parts[1]}[op]()
        close_equal(t, ref, f"all_reduce {op} of {n} floats")
    # a non-contiguous but dense tensor, and a view with a storage offset
    t = torch.arange(12., device=dev).reshape(3, 4).t()
    dist.all_reduce(t)
    close_equal(t, 2 * torch.arange(12.).reshape(3, 4).t(), "all_reduce transposed")
    base = torch.zeros(10, device=dev)
    v = base[3:7]
    v.fill_(rank + 1)
    dist.all_reduce(v)
    close_equal(base, torch.tensor([0, 0, 0, 3, 3, 3, 3, 0, 0, 0.]), "all_reduce of a view")

    # broadcast, reduce
    t = full(float(rank))
    dist.broadcast(t, src=1)
    close_equal(t, torch.ones(4), "broadcast")
    t = full(float(rank + 1))
    dist.reduce(t, dst=0)
    close_equal(t, torch.full((4,), 3.0 if rank == 0 else 2.0), "reduce")
    t = full(float(rank + 1))
    dist.reduce(t, dst=1, op=dist._make_nccl_premul_sum(2.0))
    close_equal(t, torch.full((4,), 6.0 if rank == 1 else 1.0), "reduce PREMUL_SUM (a non-root input is unchanged)")

    # all_gather, all_gather_into_tensor
    out = [torch.empty(3, device=dev) for _ in range(world)]
    dist.all_gather(out, torch.full((3,), float(rank), device=dev))
    for r in range(world):
        close_equal(out[r], torch.full((3,), float(r)), "all_gather")
    out = torch.empty(world * 3, device=dev)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank), device=dev))
    close_equal(out, torch.tensor([0., 0, 0, 1, 1, 1]), "all_gather_into_tensor")

    # every dtype, larger sizes (a reduce_scatter_tensor runs as one all-to-all)
    for dt in (torch.bool, torch.int8, torch.int64, torch.bfloat16, torch.float32, torch.complex64):
        parts = [(torch.randn(300, 7, generator=torch.Generator().manual_seed(r)) * 4).to(dt) for r in range(world)]
        out = torch.empty(world * 300, 7, device=dev, dtype=dt)
        dist.all_gather_into_tensor(out, parts[rank].to(dev))
        assert torch.equal(out.cpu(), torch.cat(parts)), f"all_gather_into_tensor of {dt}"
    for dt, op in [(torch.float32, dist.ReduceOp.SUM), (torch.bfloat16, dist.ReduceOp.SUM),
                   (torch.int32, dist.ReduceOp.MAX), (torch.float64, dist.ReduceOp.AVG)]:
        parts = [(torch.randn(world * 5000, generator=torch.Generator().manual_seed(r)) * 4).to(dt) for r in range(world)]
        out = torch.empty(5000, device=dev, dtype=dt)
        dist.reduce_scatter_tensor(out, parts[rank].to(dev), op=op)
        whole = {dist.ReduceOp.SUM: parts[0] + parts[1], dist.ReduceOp.MAX: torch.maximum(*parts),
                 dist.ReduceOp.AVG: (parts[0] + parts[1]) / 2}[op]
        assert torch.equal(out.cpu(), whole[rank * 5000:(rank + 1) * 5000]), f"reduce_scatter_tensor {op} of {dt}"

    # coalesced forms (ProcessGroup methods)
    pg = dist.group.WORLD
    ins = [torch.full((2,), float(rank), device=dev), torch.full((3,), float(rank + 5), device=dev)]
    outs = [torch.empty(4, device=dev), torch.empty(6, device=dev)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    close_equal(outs[0], torch.tensor([0., 0, 1, 1]), "allgather_into_tensor_coalesced")
    close_equal(outs[1], torch.tensor([5., 5, 5, 6, 6, 6]), "allgather_into_tensor_coalesced")
    outs = [torch.empty(1, device=dev), torch.empty(2, device=dev)]
    ins = [torch.arange(2., device=dev), torch.arange(4., device=dev)]
    pg.reduce_scatter_tensor_coalesced(outs, ins).wait()
    close_equal(outs[0], torch.tensor([2. * rank]), "reduce_scatter_tensor_coalesced")
    close_equal(outs[1], (2 * torch.arange(4.))[2 * rank:2 * rank + 2], "reduce_scatter_tensor_coalesced")
    ts = [torch.full((2,), float(rank + 1), device=dev), torch.full((3,), float(rank + 3), device=dev)]
    pg.allreduce_coalesced(ts).wait()
    close_equal(ts[0], torch.full((2,), 3.0), "allreduce_coalesced")
    close_equal(ts[1], torch.full((3,), 7.0), "allreduce_coalesced")

    # reduce_scatter (list and tensor)
    out = torch.empty(2, device=dev)
    dist.reduce_scatter(out, [torch.full((2,), float(10 * rank + i), device=dev) for i in range(world)])
    close_equal(out, torch.full((2,), float(10 + 2 * rank)), "reduce_scatter")
    out = torch.empty(2, device=dev)
    inp = torch.arange(4., device=dev) * (rank + 1)
    dist.reduce_scatter_tensor(out, inp)
    close_equal(out, (torch.arange(4.) * 3)[2 * rank:2 * rank + 2], "reduce_scatter_tensor")
    close_equal(inp, torch.arange(4.) * (rank + 1), "reduce_scatter_tensor leaves its input")
    out = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(out, torch.arange(4., device=dev), op=dist.ReduceOp.AVG)
    close_equal(out, torch.arange(4.)[2 * rank:2 * rank + 2], "reduce_scatter_tensor AVG")

    # all_to_all (single, with splits, list)
    out = torch.empty(4, device=dev)
    dist.all_to_all_single(out, torch.arange(4., device=dev) + 10 * rank)
    close_equal(out, torch.tensor([0., 1, 10, 11]) + 2 * rank, "all_to_all_single")
    in_splits = [1, 2] if rank == 0 else [3, 1]
    out_splits = [1, 3] if rank == 0 else [2, 1]
    inp = torch.arange(float(sum(in_splits)), device=dev) + 100 * rank
    out = torch.empty(sum(out_splits), device=dev)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    expect = torch.tensor([0., 100, 101, 102]) if rank == 0 else torch.tensor([1., 2, 103])
    close_equal(out, expect, "all_to_all_single with splits")
    outs = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_to_all(outs, [torch.full((2,), float(10 * rank + i), device=dev) for i in range(world)])
    for r in range(world):
        close_equal(outs[r], torch.full((2,), float(10 * r + rank)), "all_to_all")

    # gather, scatter
    g = [torch.empty(2, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((2,), float(rank), device=dev), g, dst=0)
    if rank == 0:
        for r in range(world):
            close_equal(g[r], torch.full((2,), float(r)), "gather")
    s = torch.empty(2, device=dev)
    dist.scatter(s, [torch.full((2,), float(i + 5), device=dev) for i in range(world)] if rank == 1 else None, src=1)
    close_equal(s, torch.full((2,), float(rank + 5)), "scatter")

    # send / recv, isend / irecv
    if rank == 0:
        dist.send(torch.arange(3., device=dev), 1)
        x = torch.empty(3, device=dev)
        dist.irecv(x, 1).wait()
        close_equal(x, torch.arange(3.) * 2, "irecv")
    else:
        x = torch.empty(3, device=dev)
        dist.recv(x, 0)
        close_equal(x, torch.arange(3.), "recv")
        dist.isend(x * 2, 0).wait()

    # a subgroup
    sub = dist.new_group([0, 1])
    t = full(float(rank + 1))
    dist.all_reduce(t, group=sub)
    close_equal(t, torch.full((4,), 3.0), "all_reduce on a new_group")

    # async_op, futures, barrier, objects, CPU tensors
    t = full(1.0, n=1000)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    assert fut.wait()[0].device == dev
    close_equal(t, torch.full((1000,), 2.0), "all_reduce async_op")
    fut2 = dist.all_reduce(full(1.0), async_op=True).get_future().then(lambda f: f.value()[0] * 10)
    close_equal(fut2.wait(), torch.full((4,), 20.0), "future.then")
    dist.barrier()
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs
    c = torch.ones(2)
    dist.all_reduce(c)
    close_equal(c, torch.full((2,), 2.0), "CPU tensor all_reduce")
    assert type(backend).__name__ == "Backend" and dist.get_backend() == "openmtia"
    dist.destroy_process_group()


def one_rank(rank, world, port):
    """A group of one rank (what DistributedModelParallel and DDP make in a
    one-process job): every collective's result is its input's (a PREMUL_SUM's
    scaled), computed without Gloo: the process has no Gloo thread."""
    dev = init(rank, world, port)
    x = torch.arange(12., device=dev).reshape(3, 4)
    expect = torch.arange(12.).reshape(3, 4)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
        t = x.clone()
        dist.all_reduce(t, op=op)
        close_equal(t, expect, f"all_reduce {op}")
    t = x.clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(3.0))
    close_equal(t, expect * 3, "all_reduce PREMUL_SUM")
    t = x.clone()
    dist.broadcast(t, src=0)
    dist.reduce(t, dst=0)
    close_equal(t, expect, "broadcast, reduce")
    out = [torch.empty(3, 4, device=dev)]
    dist.all_gather(out, x)
    close_equal(out[0], expect, "all_gather")
    out = torch.empty(4, 3, device=dev)
    dist.all_gather_into_tensor(out, x.t())  # (a transposed input: its elements in its index order)
    close_equal(out, expect.t(), "all_gather_into_tensor")
    out = torch.empty(3, 4, device=dev)
    dist.reduce_scatter(out, [x])
    close_equal(out, expect, "reduce_scatter")
    out = torch.empty(3, 4, device=dev)
    dist.reduce_scatter_tensor(out, x, op=dist._make_nccl_premul_sum(2.0))
    close_equal(out, expect * 2, "reduce_scatter_tensor PREMUL_SUM")
    close_equal(x, expect, "reduce_scatter_tensor leaves its input")
    out = torch.empty(12, device=dev)
    dist.all_to_all_single(out, x.reshape(-1), [12], [12])
    close_equal(out, expect.reshape(-1), "all_to_all_single")
    outs = [torch.empty(5, device=dev)]
    dist.all_to_all(outs, [torch.arange(5., device=dev)])
    close_equal(outs[0], torch.arange(5.), "all_to_all")
    g = [torch.empty(3, 4, device=dev)]
    dist.gather(x, g, dst=0)
    close_equal(g[0], expect, "gather")
    out = torch.empty(3, 4, device=dev)
    dist.scatter(out, [x + 1], src=0)
    close_equal(out, expect + 1, "scatter")
    c = torch.ones(3)
    dist.all_reduce(c)
    close_equal(c, torch.ones(3), "CPU tensor all_reduce")
    dist.barrier()
    # a collective is ordered on its stream: the result of work queued before it
    t = torch.zeros(1 << 16, device=dev)
    t.add_(5)
    out = torch.empty_like(t)
    dist.all_to_all_single(out, t)
    out.mul_(2)
    close_equal(out[:3], torch.full((3,), 10.0), "all_to_all_single between queued work")
    names = {open(f"/proc/self/task/{tid}/comm").read().strip() for tid in os.listdir("/proc/self/task")}
    assert not any("gloo" in n for n in names), f"a group of one made Gloo threads: {sorted(names)}"
    dist.destroy_process_group()


def init_forms(rank, world, port, form):
    """init_process_group's ways of naming (or not naming) the backend."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.mtia.set_device(rank)
    kwargs = {"rank": rank, "world_size": world}
    if form == "device_id":
        kwargs["device_id"] = torch.device("mtia", rank)
    elif form == "device_map":
        kwargs["backend"] = "mtia:openmtia,cpu:gloo"
    elif form == "name":
        kwargs["backend"] = "openmtia"
    dist.init_process_group(**kwargs)
    pg = dist.group.WORLD
    assert type(pg._get_backend(torch.device("mtia"))).__name__ == "Backend"
    assert dist.get_backend_config(pg).count("openmtia") >= 1, dist.get_backend_config(pg)
    if form in ("device_map", "none"):
        # no backend named: CPU tensors keep CPU's default, Gloo, beside mtia's
        # (without openmtia installed the same program gets a Gloo group)
        assert "cpu:gloo" in dist.get_backend_config(pg), dist.get_backend_config(pg)
    t = torch.full((4,), float(rank + 1), device=f"mtia:{rank}")
    dist.all_reduce(t)
    close_equal(t, torch.full((4,), 3.0), f"{form}: mtia all_reduce")
    c = torch.full((4,), float(rank + 1))
    dist.all_reduce(c)
    close_equal(c, torch.full((4,), 3.0), f"{form}: CPU all_reduce")
    dist.destroy_process_group()


def sends_first(rank, world, port):
    """Both ranks send first, then receive, 16 MB each way (more than a socket
    holds): the sends and receives run on streams of their own, at once. (A
    synchronous driver runs the send on the calling thread, which then never
    posts its receive: needs_async.)"""
    dev = init(rank, world, port)
    big = torch.full((4 << 20,), float(rank), device=dev)
    got = torch.empty_like(big)
    peer = 1 - rank
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, peer), dist.P2POp(dist.irecv, got, peer)])
    for r in reqs:
        r.wait()
    close_equal(got[-4:], torch.full((4,), float(peer)), "batch_isend_irecv")
    dist.destroy_process_group()


# ---------------------------------------------------------------- stream semantics
def stream_semantics(rank, world, port):
    from openmtia import _C_test
    dev = init(rank, world, port)
    t = torch.zeros(1 << 16, device=dev)
    # warm up: a signature's first call runs synchronously (it makes its plan)
    t.fill_(rank + 1)
    t.mul_(2)
    dist.all_reduce(t)
    torch.mtia.synchronize()
    gate = _C_test.launch_blocking_task(dev.index, 30.0)  # holds the current stream
    t.fill_(rank + 1)  # queued behind the gate
    t0 = time.perf_counter()
    work = dist.all_reduce(t, async_op=True)
    work.wait()  # the stream waits, not the host
    t.mul_(2)  # queued after the collective
    returned = time.perf_counter() - t0
    time.sleep(0.2)
    still_pending = not work.is_completed()
    gate.release()
    torch.mtia.synchronize()
    assert returned < 0.15, f"all_reduce + wait blocked the host for {returned:.3f} s"
    assert still_pending, "the collective ran before the work queued ahead of it"
    assert work.is_completed() and work.is_success()
    close_equal(t[:4], torch.full((4,), 6.0), "all_reduce ordered between queued work")

    # its future, as NCCL's: complete at the call; waiting for it (wait, value,
    # then) makes the waiting stream wait, not the host
    t * 2  # (warm)
    torch.mtia.synchronize()
    gate = _C_test.launch_blocking_task(dev.index, 30.0)
    t.fill_(rank + 1)
    t0 = time.perf_counter()
    fut = dist.all_reduce(t, async_op=True).get_future()
    out = fut.wait()[0]
    doubled = fut.then(lambda f: f.value()[0] * 2)
    u = doubled.wait()
    returned = time.perf_counter() - t0
    time.sleep(0.2)
    still_pending = not torch.mtia.current_stream().query()
    gate.release()
    torch.mtia.synchronize()
    assert returned < 0.15, f"a collective's future.wait() blocked the host for {returned:.3f} s"
    assert still_pending and out is t
    close_equal(t[:4], torch.full((4,), 3.0), "all_reduce through its future")
    close_equal(u[:4], torch.full((4,), 6.0), "the future's then()")

    # DDP: backward returns without waiting for the device (its buckets'
    # futures are device futures); the step equals CPU's
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(cpu_model).to(dev), device_ids=[dev])
    xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    for _ in range(2):  # (warm: first calls of each signature)
        ddp.zero_grad()
        ddp(xs[rank].to(dev)).square().sum().backward()
    torch.mtia.synchronize()
    ddp.zero_grad()
    x = xs[rank].to(dev)
    gate = _C_test.launch_blocking_task(dev.index, 30.0)
    t0 = time.perf_counter()
    ddp(x).square().sum().backward()
    returned = time.perf_counter() - t0
    time.sleep(0.2)
    still_pending = not torch.mtia.current_stream().query()
    gate.release()
    torch.mtia.synchronize()
    assert returned < 0.15 and still_pending, f"DDP's backward waited for the device ({returned:.3f} s)"
    cpu_model(torch.cat(xs)).square().sum().div(world).backward()
    for p, q in zip(ddp.module.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)

    # on a side stream: the collective follows that stream's work
    s = torch.mtia.Stream()
    x = torch.zeros(8, device=dev)
    x.fill_(rank + 1)  # warm up
    x * 10
    torch.mtia.synchronize()
    with torch.mtia.stream(s):
        gate = _C_test.launch_blocking_task(dev.index, 30.0)
        x.fill_(rank + 1)
        dist.all_reduce(x)
        y = x * 10
    gate.release()
    s.synchronize()
    close_equal(y, torch.full((8,), 30.0), "all_reduce on a side stream")
    dist.destroy_process_group()


# ---------------------------------------------------------------- errors
def errors(rank, world, port):
    dev = init(rank, world, port, timeout_s=30)

    def raises(fn, *needles):
        try:
            fn()
        except (RuntimeError, ValueError, TypeError) as e:
            msg = str(e)
            assert all(n in msg for n in needles), f"{needles} not in: {msg}"
            return e
        raise AssertionError(f"no error raised (expected {needles})")

    # argument errors: at the call, on this rank only (nothing is sent)
    other = torch.device("mtia", 1 - dev.index)
    raises(lambda: dist.all_reduce(torch.ones(4, device=other)), "uses mtia:", f"got a tensor on mtia:{other.index}")
    raises(lambda: dist.all_gather([torch.empty(4, device=dev)], torch.ones(4, device=dev)), "all_gather")
    raises(lambda: dist.all_gather_into_tensor(torch.empty(5, device=dev), torch.ones(4, device=dev)),
           "all_gather_into_tensor", "elements")
    raises(lambda: dist.broadcast(torch.ones(4, device=dev), src=7), "broadcast: invalid root rank 7 for a group of 2")
    raises(lambda: dist.all_reduce(torch.ones(4, 4, device=dev)[:, :2]), "dense")
    raises(lambda: dist.all_to_all_single(torch.empty(4, device=dev), torch.ones(4, device=dev), [1, 1], [2, 2]),
           "splits")
    raises(lambda: dist.reduce_scatter_tensor(torch.empty(2, device=dev), torch.ones(3, device=dev)),
           "reduce_scatter_tensor")
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)  # the group is still in step
    close_equal(t, torch.full((4,), 2.0), "all_reduce after argument errors")

    # mismatches across ranks: raised on every rank, at the next sync; the
    # data never moves and the group stays usable
    def mismatch(fn, *needles):
        def run():
            fn()
            torch.mtia.synchronize()
        return raises(run, "collective mismatch", *needles)

    mismatch(lambda: dist.all_reduce(torch.ones(4 if rank == 0 else 8, device=dev)), "4 elements", "8 elements")
    mismatch(lambda: dist.all_reduce(torch.ones(4, device=dev, dtype=torch.float32 if rank == 0 else torch.int32)),
             "Float", "Int")
    mismatch(lambda: dist.all_reduce(torch.ones(2, 3, device=dev) if rank == 0 else torch.ones(3, 2, device=dev)),
             "other tensor shapes")
    mismatch(lambda: dist.all_reduce(torch.ones(4, device=dev)) if rank == 0 else dist.broadcast(torch.ones(4, device=dev), src=0), "ALLREDUCE",
             "BROADCAST")
    mismatch(lambda: dist.all_reduce(torch.ones(4, device=dev), op=dist.ReduceOp.SUM if rank else dist.ReduceOp.MAX),
             "another reduce op")
    # all-to-all sizes that disagree across ranks (what rank 0 sends rank 1 is not what rank 1 expects)
    splits = [1, 3] if rank == 0 else [2, 2]
    mismatch(lambda: dist.all_to_all_single(torch.empty(4, device=dev), torch.ones(4, device=dev), splits, splits),
             "ALLTOALL_BASE of Float with sizes that disagree across ranks",
             f"rank {rank} sends {splits} elements and expects {splits}")
    mismatch(lambda: dist.all_to_all([torch.empty(2, device=dev)] * 2,
                                     [torch.ones(2 + rank, device=dev), torch.ones(2 + rank, device=dev)]),
             "ALLTOALL of Float with sizes that disagree")
    out = torch.empty(4, device=dev)
    dist.all_to_all_single(out, torch.arange(4., device=dev) + 10 * rank, [1, 3] if rank == 0 else [3, 1],
                           [1, 3] if rank == 0 else [3, 1])
    close_equal(out, torch.tensor([0., 10, 11, 12]) if rank == 0 else torch.tensor([1., 2, 3, 13]),
                "all_to_all_single after a mismatch")
    # a send and a receive of different sizes: both ranks raise, the process lives
    def p2p_mismatch():
        if rank == 0:
            dist.send(torch.ones(8, device=dev), 1)
        else:
            dist.recv(torch.empty(4, device=dev), 0)
        torch.mtia.synchronize()  # like a collective's, raised at the next sync
    raises(p2p_mismatch, "send/recv mismatch",
           "rank 0 sent 8 elements of Float (32 bytes) to rank 1, which receives 4 elements of Float (16 bytes)"
           if rank == 0 else
           "rank 1 receives 4 elements of Float (16 bytes) from rank 0, which sent 8 elements of Float (32 bytes)")
    x = torch.arange(3., device=dev) if rank == 0 else torch.zeros(3, device=dev)
    dist.send(x, 1) if rank == 0 else dist.recv(x, 0)
    close_equal(x, torch.arange(3.), "send/recv after a mismatch")
    work = dist.all_reduce(torch.ones(4 if rank == 0 else 6, device=dev), async_op=True)
    e = raises(lambda: work.wait(datetime.timedelta(seconds=20)), "collective mismatch")
    assert isinstance(e, dist.DistBackendError), type(e)
    # through its future (a device future): waiting for it does not raise, the
    # stream that waited raises at its next sync; a then() callback's stream
    # (a pool stream) raises at the device's next synchronize
    fut = dist.all_reduce(torch.ones(4 if rank == 0 else 6, device=dev), async_op=True).get_future()
    fut.wait()
    raises(lambda: torch.mtia.current_stream().synchronize(), "collective mismatch", "4 elements", "6 elements")
    fut = dist.all_reduce(torch.ones(4 if rank == 0 else 6, device=dev), async_op=True).get_future()
    fut.then(lambda f: f.value()[0] + 1).wait()
    raises(torch.mtia.synchronize, "collective mismatch", "4 elements", "6 elements")
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    close_equal(t, torch.full((4,), 2.0), "all_reduce after mismatches")
    dist.destroy_process_group()


def freed_input_is_not_reused(rank, world, port):
    """A collective's input freed right after the call (a temporary): its block
    is not handed out again until the collective, on the backend's
    communication stream, is done with it (as NCCL's recordStream). With the
    caller's stream held, the caller's next allocation of the same size gets
    another block, and the collective still sends the input's values."""
    import openmtia._C_test
    dev = init(rank, world, port)
    out = torch.empty(4 * world, device=dev)
    torch.mtia.synchronize()
    gate = openmtia._C_test.launch_blocking_task(dev.index, 30.0)
    try:
        inp = torch.full((4 * world,), float(rank + 1), device=dev)  # queued behind the gate
        ptr = inp.data_ptr()
        dist.all_to_all_single(out, inp)
        del inp  # the collective has not read it yet
        other = torch.empty(4 * world, device=dev)
        reused = other.data_ptr() == ptr
        other.fill_(-1.0)
    finally:
        gate.release()
    assert not reused, "the freed input's block was handed out before the collective read it"
    close_equal(out, torch.cat([torch.full((4,), float(r + 1)) for r in range(world)]), "all_to_all_single")
    dist.destroy_process_group()


def dead_rank(rank, world, port, result_path):
    dev = init(rank, world, port, timeout_s=10)
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    torch.mtia.synchronize()
    if rank == 1:
        os._exit(0)  # dies without a word to the group
    time.sleep(0.5)
    t0 = time.perf_counter()
    outcome = outcome_of(lambda: (dist.all_reduce(t), t.cpu()))
    elapsed = time.perf_counter() - t0
    # the device stays usable
    usable = (torch.ones(3, device=dev) * 2).sum().item() == 6.0
    with open(result_path, "w") as f:
        f.write(f"{elapsed}\n{usable}\n{outcome}\n")
    dist.destroy_process_group()  # a broken group tears down too


def hung_rank(rank, world, port, result_dir):
    """Rank 1's collective hangs (a fault: the rank stops responding, alive
    and connected): rank 0 raises within the group's timeout; rank 1's own
    wait with a timeout raises at it; once the fault is released the hung
    collective fails and both ranks' devices and teardown go on."""
    import openmtia.faults as faults

    dev = init(rank, world, port, timeout_s=5)
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    torch.mtia.synchronize()
    t0 = time.perf_counter()
    if rank == 1:
        faults.inject("hang", op="c10d:all_reduce")
        work = dist.all_reduce(t, async_op=True)
        outcome = outcome_of(lambda: work.wait(timeout=datetime.timedelta(seconds=2)))
    else:
        outcome = outcome_of(lambda: (dist.all_reduce(t), t.cpu()))
    elapsed = time.perf_counter() - t0
    released = ""
    if rank == 1:
        # alive, connected and silent until rank 0 gave up on it
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(result_dir, "rank0")) and time.monotonic() < deadline:
            time.sleep(0.1)
        faults.clear()  # the hung collective fails, not run; its failure reaches the stream that waited
        released = outcome_of(torch.mtia.synchronize)
    usable = (torch.ones(3, device=dev) * 2).sum().item() == 6.0
    with open(os.path.join(result_dir, f"rank{rank}.tmp"), "w") as f:
        f.write(f"{elapsed}\n{usable}\n{outcome}\n{released}\n")
    os.rename(os.path.join(result_dir, f"rank{rank}.tmp"), os.path.join(result_dir, f"rank{rank}"))
    dist.destroy_process_group()


def corrupt_payload(rank, world, port, result_dir, checksums):
    """Rank 1 receives a corrupted payload (a corrupt fault: one bit of the
    collective's result flipped in transit) in each of four collectives.
    With checksums on, every rank raises naming the collective; off, rank 1
    silently holds another result than rank 0. Both ranks write what they
    saw and their results; then a collective with no fault equals CPU's."""
    import openmtia.faults as faults

    os.environ["OPENMTIA_C10D_CHECKSUM"] = checksums
    dev = init(rank, world, port, timeout_s=30)
    parts = [torch.randn(1000, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    big = [torch.randn(40000, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]

    def all_reduce(x):
        t = x[rank].to(dev)
        dist.all_reduce(t)
        return t

    def broadcast(_):
        t = parts[rank].to(dev)
        dist.broadcast(t, src=0)
        return t

    def all_gather_into_tensor(_):
        out = torch.empty(world * 1000, device=dev)
        dist.all_gather_into_tensor(out, parts[rank].to(dev))
        return out

    lines, results = [], []
    for name, op, x in [("all_reduce", all_reduce, parts), ("all_reduce", all_reduce, big),
                        ("broadcast", broadcast, None), ("all_gather_into_tensor", all_gather_into_tensor, None)]:
        if rank == 1:
            faults.inject("corrupt", op=f"c10d:{name}")
        out = []
        lines.append(outcome_of(lambda: out.append(op(x).cpu())))
        faults.clear()
        results.append(out[0] if out else None)
    # the group and the device go on
    t = parts[rank].to(dev)
    dist.all_reduce(t)
    after = torch.equal(t.cpu(), parts[0] + parts[1])
    torch.save(results, os.path.join(result_dir, f"results{rank}.pt"))
    with open(os.path.join(result_dir, f"rank{rank}"), "w") as f:
        f.write("\n".join(lines + [str(after)]) + "\n")
    dist.destroy_process_group()


# ---------------------------------------------------------------- training
class Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)])
        self.unused = torch.nn.Linear(4, 4) if unused else None

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


def data(n=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)


def reference(model, steps, lr=0.1):
    """One process, the whole batch, on CPU."""
    model = copy.deepcopy(model).cpu()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = data(seed=step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def ddp(rank, world, port, variant, addr="127.0.0.1"):
    dev = init(rank, world, port, addr=addr)
    torch.manual_seed(0)
    model = Net(unused=variant == "find_unused_parameters")
    ref = reference(model, steps=5)
    kwargs = {"bucket_cap_mb": 0.002}  # 2 KB buckets: several buckets for this model
    if variant in ("gradient_as_bucket_view", "find_unused_parameters", "static_graph"):
        kwargs[variant] = True
    m = DDP(model.to(dev), **kwargs)
    if variant == "comm_hook":  # futures: the hook's callbacks run on the backend's completion thread
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        m.register_comm_hook(None, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(5):
        x, y = data(seed=step)
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        opt.zero_grad()
        if variant == "no_sync":
            half = len(x) // 2
            with m.no_sync():
                (0.5 * torch.nn.functional.mse_loss(m(x[:half]), y[:half])).backward()
            (0.5 * torch.nn.functional.mse_loss(m(x[half:]), y[half:])).backward()
        else:
            torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    log = m._get_ddp_logging_data()
    buckets = str(log.get("rebuilt_bucket_sizes") or log.get("bucket_sizes")).split(",")
    assert len(buckets) > 1 or log.get("num_buckets_reduced", 0) > 1, f"expected several gradient buckets: {log}"
    for (name, p), q in zip(m.module.named_parameters(), ref.parameters()):
        close_equal(p, q, f"DDP[{variant}] {name}", atol=1e-5)
    dist.destroy_process_group()


def fsdp2(rank, world, port, ckpt_dir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    dev = init(rank, world, port)
    mesh = init_device_mesh("mtia", (world,))
    assert mesh.device_type == "mtia"

    # DTensor on the mesh
    full = torch.arange(16., device=dev).reshape(4, 4)
    d = distribute_tensor(full, mesh, [Shard(0)])
    assert d.to_local().shape == (2, 4) and d.to_local().device == dev
    close_equal(d.full_tensor(), full, "DTensor full_tensor")
    close_equal(d.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor redistribute")
    close_equal((d * 2).sum().full_tensor(), full.sum() * 2, "DTensor sum")

    torch.manual_seed(0)
    model = Net()
    ref = reference(model, steps=3)
    model = model.to(dev)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = data(seed=step)
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.to_local().device == dev
        close_equal(p.full_tensor(), q, f"FSDP2 {name}", atol=1e-5)

    # distributed checkpoint: save sharded, spoil, load back
    state = get_model_state_dict(model)
    dcp.save(state, checkpoint_id=ckpt_dir)
    saved = {k: v.full_tensor().cpu().clone() for k, v in state.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    state = get_model_state_dict(model)
    dcp.load(state, checkpoint_id=ckpt_dir)
    set_model_state_dict(model, state)
    for k, v in get_model_state_dict(model).items():
        assert v.to_local().device == dev
        close_equal(v.full_tensor(), saved[k], f"DCP {k}")
    dist.destroy_process_group()
