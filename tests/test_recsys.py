"""Recommendation models on mtia (issue 42): TorchRec and FBGEMM.

Point 1, the dependencies: scripts/setup.sh installs torchrec and FBGEMM's
CPU build, pinned as a pair that loads with torch 2.13; openmtia does not
require them.
"""
import importlib.metadata
import os
import re

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

PINS = {"torchrec": "1.8.0", "fbgemm-gpu-cpu": "1.8.0"}  # as scripts/setup.sh installs them


def test_torchrec_and_fbgemm_cpu_are_the_pinned_pair_beside_the_cpu_torch():
    for name, version in PINS.items():
        assert importlib.metadata.version(name) == version, name
    assert torch.__version__ == "2.13.0+cpu"
    try:
        importlib.metadata.version("fbgemm-gpu")  # torchrec's declared requirement: FBGEMM's CUDA build
        raise AssertionError("fbgemm-gpu (the CUDA build) is installed beside fbgemm-gpu-cpu")
    except importlib.metadata.PackageNotFoundError:
        pass
    setup = open(os.path.join(os.path.dirname(__file__), "..", "scripts", "setup.sh")).read()
    for name, version in PINS.items():
        assert re.search(rf"\b{name}=={re.escape(version)}\b", setup), name


def test_openmtia_does_not_require_them():
    requires = importlib.metadata.requires("openmtia") or []
    assert not [r for r in requires if re.match(r"(torchrec|fbgemm)", r)], requires


def test_fbgemm_ops_load_and_run_on_mtia_like_cpu():
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    import torchrec  # noqa: F401

    lengths = torch.tensor([3, 0, 2, 5])
    expected = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
    got = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths.to("mtia"))
    assert got.device.type == "mtia"
    torch.testing.assert_close(got.cpu(), expected)


# ---------------------------------------------------------------- point 3: FBGEMM's ops
LENGTHS = torch.tensor([[2, 0, 1], [1, 3, 0]], dtype=torch.int32)  # 2 features x batch 3
OFFSETS = torch.tensor([0, 2, 2, 3, 4, 7, 7])
SPARSE_OPS = {  # the jagged and KJT ops TorchRec calls, with arguments
    "permute_2D_sparse_data": lambda: (torch.tensor([1, 0], dtype=torch.int32), LENGTHS, torch.arange(7),
                                       torch.rand(7), None),
    "permute_1D_sparse_data": lambda: (torch.tensor([2, 0, 1, 5, 4, 3], dtype=torch.int32), LENGTHS.flatten(),
                                       torch.arange(7), torch.rand(7), None),
    "asynchronous_complete_cumsum": lambda: (LENGTHS.flatten(),),
    "asynchronous_exclusive_cumsum": lambda: (LENGTHS.flatten(),),
    "asynchronous_inclusive_cumsum": lambda: (LENGTHS.flatten(),),
    "jagged_to_padded_dense": lambda: (torch.randn(7, 3), [OFFSETS], [4], 0.0),
    "dense_to_jagged": lambda: (torch.randn(6, 4, 3), [OFFSETS]),
    "segment_sum_csr": lambda: (1, OFFSETS.int(), torch.randn(7)),
    "block_bucketize_sparse_features": lambda: (LENGTHS.flatten(), torch.arange(7), False, True,
                                                torch.tensor([4, 4]), 2, None),
    "permute_pooled_embs": lambda: (torch.randn(3, 8), torch.tensor([0, 3, 8]), torch.tensor([1, 0]),
                                    torch.tensor([0, 5, 8]), torch.tensor([1, 0])),
}


@pytest.mark.parametrize("name", sorted(SPARSE_OPS))
def test_fbgemm_jagged_and_kjt_ops_on_mtia_equal_cpu(name):
    import fbgemm_gpu  # noqa: F401

    op = getattr(torch.ops.fbgemm, name)
    args = SPARSE_OPS[name]()
    expected, expected_spec = tree_flatten(op(*args))
    got, got_spec = tree_flatten(op(*tree_map(lambda a: a.to("mtia") if isinstance(a, torch.Tensor) else a, args)))
    assert got_spec == expected_spec and expected  # the same structure (Nones included), some tensor
    for e, g in zip(expected, got):
        if e is None:  # (an optional result CPU leaves out too)
            assert g is None
            continue
        assert g.device.type == "mtia", (name, g.device)
        torch.testing.assert_close(g.cpu(), e)


def _tbe(device, optimizer, pooling, tables):
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

    compute = ComputeDevice.MTIA if device == "mtia" else ComputeDevice.CPU
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, EmbeddingLocation.HOST, compute) for rows, dim in tables],
        optimizer=optimizer, learning_rate=0.05, eps=1e-4, pooling_mode=pooling, device=device)


@pytest.mark.parametrize("optimizer", ["EXACT_SGD", "EXACT_ADAGRAD", "EXACT_ROWWISE_ADAGRAD"])
@pytest.mark.parametrize("pooling", ["SUM", "MEAN"])
def test_table_batched_embeddings_with_fused_optimizers_train_like_cpu(optimizer, pooling):
    """FBGEMM's TBE on mtia (ComputeDevice.MTIA: CPU's op schemas over mtia
    tensors), forward and the backward's fused update, over batches of
    different sizes, equal to CPU's: outputs, tables and optimizer states."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

    tables = [(40, 8), (25, 4), (60, 8)]
    opt, pool = getattr(EmbOptimType, optimizer), getattr(PoolingMode, pooling)
    cpu, mt = _tbe("cpu", opt, pool, tables), _tbe("mtia", opt, pool, tables)
    g = torch.Generator().manual_seed(0)
    for c, m in zip(cpu.split_embedding_weights(), mt.split_embedding_weights()):
        c.copy_(torch.randn(c.shape, generator=g))
        m.copy_(c)
    for batch in (4, 7, 4, 2):  # new shapes and a repeated one
        lengths = torch.randint(0, 4, (len(tables) * batch,), generator=g)
        indices = torch.cat([torch.randint(0, tables[i // batch][0], (int(n),), generator=g)
                             for i, n in enumerate(lengths)])
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        target = torch.randn(batch, sum(d for _, d in tables), generator=g)
        out_c = cpu(indices, offsets)
        out_m = mt(indices.to("mtia"), offsets.to("mtia"))
        assert out_m.device.type == "mtia"
        torch.testing.assert_close(out_m.detach().cpu(), out_c.detach(), atol=1e-5, rtol=1e-5)
        (out_c - target).pow(2).sum().backward()
        (out_m - target.to("mtia")).pow(2).sum().backward()
    for c, m in zip(cpu.split_embedding_weights(), mt.split_embedding_weights()):
        torch.testing.assert_close(m.cpu(), c, atol=1e-5, rtol=1e-5)
    for c_states, m_states in zip(cpu.split_optimizer_states(), mt.split_optimizer_states()):
        for c, m in zip(c_states, m_states):
            torch.testing.assert_close(m.cpu(), c, atol=1e-5, rtol=1e-5)


def _batch(tables, batch, g, weighted=False):
    lengths = torch.randint(0, 4, (len(tables) * batch,), generator=g)
    indices = torch.cat([torch.randint(0, tables[i // batch][0], (int(n),), generator=g)
                         for i, n in enumerate(lengths)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    weights = torch.rand(indices.numel(), generator=g) if weighted else None
    return indices, offsets, weights


@pytest.mark.parametrize("optimizer", ["EXACT_SGD", "EXACT_ROWWISE_ADAGRAD"])
@pytest.mark.parametrize("weighted,pooling", [(False, "SUM"), (True, "SUM"), (False, "NONE")])
def test_a_lookup_of_a_new_batch_shape_is_asynchronous_with_no_first_call(optimizer, weighted, pooling):
    """Point 3's speed: every batch has new shapes (its indices' count), and
    after the first batch none of them costs a synchronous first call: the
    bounds check, forward, backward with its fused update (and the per-sample
    weights' gradient) are planned by their meta functions and queue behind a
    held stream. The results still equal CPU's, the first batch's and the
    later ones'."""
    import openmtia._C_test  # the test-only module (launch_blocking_task)
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

    tables = [(40, 8), (25, 8), (60, 8)]  # (unpooled lookups take one dimension)
    opt, pool = getattr(EmbOptimType, optimizer), getattr(PoolingMode, pooling)
    cpu, mt = _tbe("cpu", opt, pool, tables), _tbe("mtia", opt, pool, tables)
    g = torch.Generator().manual_seed(1)
    for c, m in zip(cpu.split_embedding_weights(), mt.split_embedding_weights()):
        c.copy_(torch.randn(c.shape, generator=g))
        m.copy_(c)

    def step(module, indices, offsets, weights):
        out = module(indices, offsets, per_sample_weights=weights)
        out.pow(2).sum().backward()
        return out

    for i, batch in enumerate((4, 6, 3, 9)):
        indices, offsets, weights = _batch(tables, batch, g, weighted)
        w_c = weights.clone().requires_grad_() if weighted else None
        w_m = weights.to("mtia").requires_grad_() if weighted else None
        out_c = step(cpu, indices, offsets, w_c)
        indices, offsets = indices.to("mtia"), offsets.to("mtia")  # (a copy from pageable memory waits)
        before = openmtia._C._plan_cache_stats()
        if i == 0:  # the first batch learns the plans, synchronously
            out_m = step(mt, indices, offsets, w_m)
        else:
            gate = openmtia._C_test.launch_blocking_task(0, 20.0)
            try:
                out_m = step(mt, indices, offsets, w_m)
                assert not torch.mtia.current_stream().query(), "a call waited for the stream"
            finally:
                gate.release()
            after = openmtia._C._plan_cache_stats()
            assert after["first_calls"] == before["first_calls"], (batch, before, after)
            assert after["shape_calls"] > before["shape_calls"]
        torch.testing.assert_close(out_m.detach().cpu(), out_c.detach(), atol=1e-5, rtol=1e-5)
        if weighted:
            torch.testing.assert_close(w_m.grad.cpu(), w_c.grad, atol=1e-5, rtol=1e-5)
    for c, m in zip(cpu.split_embedding_weights(), mt.split_embedding_weights()):
        torch.testing.assert_close(m.cpu(), c, atol=1e-5, rtol=1e-5)


def test_fused_adam_is_refused_on_mtia_as_on_cpu():
    """FBGEMM runs MTIA's TBE through its CPU op schemas, which have no ADAM:
    its own check refuses it for both (fbgemm-gpu-cpu 1.8.0)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

    for device in ("cpu", "mtia"):
        with pytest.raises(AssertionError, match="Optimizer adam is not supported in CPU mode"):
            _tbe(device, EmbOptimType.ADAM, PoolingMode.SUM, [(10, 4)])
