"""Sparse tensors on mtia (issue 42, point 2): COO on SparseMTIA, each
result compared with the same call on CPU.

Kernels: csrc/aten/sparse/sparse.cpp (which ones: tools/gen_sparse_ops.py).
"""
import pytest
import torch

import openmtia._C_test  # the test-only module (launch_blocking_task)


def coo(seed=0, shape=(6, 5), nnz=9, dense_dims=()):
    """An uncoalesced CPU COO tensor (repeated indices) with values to sum."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, n, (nnz,), generator=g) for n in shape])
    return torch.sparse_coo_tensor(idx, torch.randn(nnz, *dense_dims, generator=g), shape + dense_dims)


def same(mtia, cpu, **tol):
    """mtia's result equals CPU's: layout, then values (as dense)."""
    assert mtia.device.type == "mtia", mtia.device
    assert mtia.layout == cpu.layout, (mtia.layout, cpu.layout)
    m, c = mtia.cpu(), cpu
    if c.layout != torch.strided:
        m, c = m.to_dense(), c.to_dense()
    torch.testing.assert_close(m, c, **tol)


# ------------------------------------------------------------------ COO basics
def test_moving_a_coo_tensor_to_mtia_and_back_keeps_it():
    s = coo()
    m = s.to("mtia")
    assert m.is_sparse and m.device.type == "mtia" and not m.is_coalesced()
    assert m._indices().device.type == "mtia" and m._values().device.type == "mtia"
    back = m.cpu()
    assert back.is_sparse
    torch.testing.assert_close(back._indices(), s._indices())
    torch.testing.assert_close(back._values(), s._values())


def test_sparse_coo_tensor_made_on_mtia():
    s = coo()
    m = torch.sparse_coo_tensor(s._indices(), s._values(), s.shape, device="mtia")
    same(m, s)
    m2 = torch.sparse_coo_tensor(s._indices().to("mtia"), s._values().to("mtia"), s.shape)
    same(m2, s)


@pytest.mark.parametrize("dense_dims", [(), (3,)])
def test_coalesce_sums_repeated_indices(dense_dims):
    s = coo(dense_dims=dense_dims)
    c, m = s.coalesce(), s.to("mtia").coalesce()
    assert m.is_coalesced()
    torch.testing.assert_close(m._indices().cpu(), c._indices())
    torch.testing.assert_close(m._values().cpu(), c._values())


def test_to_dense_and_to_sparse():
    s = coo()
    same(s.to("mtia").to_dense(), s.to_dense())
    d = torch.randn(5, 4)
    d[d < 0.3] = 0
    m = d.to("mtia").to_sparse()
    same(m, d.to_sparse())
    torch.testing.assert_close(m.to_dense().cpu(), d)
    same(d.to("mtia").to_sparse(1), d.to_sparse(1))  # sparse_dim=1: a dense dimension


def test_adding_a_sparse_tensor_into_a_dense_one():
    s, d = coo(), torch.randn(6, 5)
    same(d.to("mtia") + s.to("mtia"), d + s)
    dm = d.to("mtia")
    dm.add_(s.to("mtia"), alpha=-0.5)
    same(dm, d.add(s, alpha=-0.5))
    same(s.to("mtia") + coo(seed=1).to("mtia"), s + coo(seed=1))  # sparse + sparse


def test_index_select_and_sparse_mm():
    s = coo(shape=(7, 6), nnz=12)
    idx = torch.tensor([4, 0, 4, 2])
    same(s.to("mtia").index_select(0, idx.to("mtia")), s.index_select(0, idx))
    same(s.to("mtia").index_select(1, idx.to("mtia")), s.index_select(1, idx))
    b = torch.randn(6, 3)
    same(torch.sparse.mm(s.to("mtia"), b.to("mtia")), torch.sparse.mm(s, b), atol=1e-5, rtol=1e-5)
    same(torch.mm(s.to("mtia"), b.to("mtia")), torch.mm(s, b), atol=1e-5, rtol=1e-5)


@pytest.mark.needs_async
def test_elementwise_ops_run_on_the_stream_without_waiting():
    """Unary ops of a coalesced tensor are kernels CUDA shares with CPU: the
    values' ops, queued on the stream."""
    s = coo().coalesce()
    m = s.to("mtia")
    torch.mtia.synchronize()
    gate = openmtia._C_test.launch_blocking_task(0, 30.0)
    try:
        out = m.abs().sqrt().neg()
        assert not torch.mtia.current_stream().query()  # queued behind the gate
    finally:
        gate.release()
    same(out, s.abs().sqrt().neg())


def test_sparse_ops_are_device_kernels_in_the_profiler():
    """The shared kernels' member ops are tasks; the host kernels (run after
    the stream, synchronously) are reported as kernels of that stream too."""
    from torch.profiler import ProfilerActivity, profile

    m, d = coo().to("mtia"), torch.zeros(6, 5, device="mtia")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as prof:
        (d + m).sum()
        m.coalesce().neg()
        torch.mtia.synchronize()
    kernels = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.MTIA}
    assert {"mtia:aten::add", "mtia:aten::_coalesce", "mtia:aten::neg_"} <= kernels, kernels


def test_an_unsupported_sparse_op_raises_naming_it_and_the_device_stays_usable():
    m = coo().to("mtia")
    with pytest.raises(NotImplementedError, match="SparseCPU"):
        torch.cumsum(coo(), 0)  # CPU has no sparse cumsum either
    with pytest.raises(NotImplementedError, match=r"openmtia: aten::cumsum is not supported on sparse COO mtia tensors"):
        torch.cumsum(m, 0)
    same(m.coalesce(), coo().coalesce())


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_out_of_range_indices_raise_and_the_device_stays_usable():
    i, v = torch.tensor([[0, 5], [1, 0]]), torch.tensor([1.0, 2.0])
    message = "size is inconsistent with indices: for dim 0, size is 2 but found index 5"
    with pytest.raises(RuntimeError, match=message):  # with torch's checks on, at construction, as on CPU
        torch.sparse_coo_tensor(i, v, (2, 2), check_invariants=True)
    with pytest.raises(RuntimeError, match=message):
        torch.sparse_coo_tensor(i.to("mtia"), v.to("mtia"), (2, 2), check_invariants=True)
    # with them off, CPU's kernels index out of bounds; mtia's check (not
    # memory outside the tensor)
    m = torch.sparse_coo_tensor(i, v, (2, 2), check_invariants=False).to("mtia")
    with pytest.raises(RuntimeError, match=message):
        m.to_dense()
    neg = torch.sparse_coo_tensor(torch.tensor([[0, -1], [1, 0]]), v, (2, 2), check_invariants=False).to("mtia")
    with pytest.raises(RuntimeError, match="found negative index -1 for dim 0"):
        torch.zeros(2, 2, device="mtia") + neg
    same(coo().to("mtia").to_dense(), coo().to_dense())


def test_compressed_layouts_raise_naming_the_limit():
    with pytest.raises(NotImplementedError, match="compressed sparse layouts .* cannot be made on mtia"):
        torch.empty(3, 3, layout=torch.sparse_csr, device="mtia")
    with pytest.raises(NotImplementedError, match="compressed sparse layouts cannot be made on mtia"):
        torch.randn(3, 3, device="mtia").to_sparse_csr()
    torch.testing.assert_close(torch.ones(2, device="mtia").sum().cpu(), torch.tensor(2.0))


# ------------------------------------------------------------- sparse gradients
@pytest.mark.parametrize("module", ["Embedding", "EmbeddingBag"])
def test_sparse_gradients_of_embeddings(module):
    torch.manual_seed(0)
    cpu = getattr(torch.nn, module)(20, 4, sparse=True)
    mt = getattr(torch.nn, module)(20, 4, sparse=True)
    mt.load_state_dict(cpu.state_dict())
    mt.to("mtia")
    ids = torch.tensor([[1, 3, 3, 7], [0, 3, 19, 7]])
    cpu(ids).pow(2).sum().backward()
    mt(ids.to("mtia")).pow(2).sum().backward()
    assert mt.weight.grad.is_sparse and mt.weight.grad.device.type == "mtia"
    same(mt.weight.grad, cpu.weight.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("opt,kwargs", [
    (torch.optim.SparseAdam, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "weight_decay": 0.0, "momentum": 0.0}),
    (torch.optim.Adagrad, {"lr": 0.1}),
])
def test_optimizers_with_sparse_gradients_train_like_cpu(opt, kwargs):
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(30, 8, sparse=True)
    mt = torch.nn.Embedding(30, 8, sparse=True)
    mt.load_state_dict(cpu.state_dict())
    mt.to("mtia")
    oc, om = opt(cpu.parameters(), **kwargs), opt(mt.parameters(), **kwargs)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        ids = torch.randint(0, 30, (6, 3), generator=g)
        for model, o, i in ((cpu, oc, ids), (mt, om, ids.to("mtia"))):
            o.zero_grad()
            model(i).sum(-1).pow(2).mean().backward()
            o.step()
    same(mt.weight.detach(), cpu.weight.detach(), atol=1e-5, rtol=1e-5)
