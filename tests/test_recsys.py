"""Recommendation models on mtia (issue 42): TorchRec and FBGEMM.

Point 1, the dependencies: scripts/setup.sh installs torchrec and FBGEMM's
CPU build, pinned as a pair that loads with torch 2.13; openmtia does not
require them.
"""
import importlib.metadata
import os
import re
import sys

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


def _tbe_pair(optimizer, pooling, tables, seed):
    """The same TBE on CPU and on mtia, with the same random tables; and the generator for the batches."""
    cpu, mt = _tbe("cpu", optimizer, pooling, tables), _tbe("mtia", optimizer, pooling, tables)
    g = torch.Generator().manual_seed(seed)
    for c, m in zip(cpu.split_embedding_weights(), mt.split_embedding_weights()):
        c.copy_(torch.randn(c.shape, generator=g))
        m.copy_(c)
    return cpu, mt, g


def _batch(tables, batch, g, weighted=False):
    lengths = torch.randint(0, 4, (len(tables) * batch,), generator=g)
    indices = torch.cat([torch.randint(0, tables[i // batch][0], (int(n),), generator=g)
                         for i, n in enumerate(lengths)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    weights = torch.rand(indices.numel(), generator=g) if weighted else None
    return indices, offsets, weights


@pytest.mark.parametrize("optimizer", ["EXACT_SGD", "EXACT_ADAGRAD", "EXACT_ROWWISE_ADAGRAD"])
@pytest.mark.parametrize("pooling", ["SUM", "MEAN"])
def test_table_batched_embeddings_with_fused_optimizers_train_like_cpu(optimizer, pooling):
    """FBGEMM's TBE on mtia (ComputeDevice.MTIA: CPU's op schemas over mtia
    tensors), forward and the backward's fused update, over batches of
    different sizes, equal to CPU's: outputs, tables and optimizer states."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

    tables = [(40, 8), (25, 4), (60, 8)]
    cpu, mt, g = _tbe_pair(getattr(EmbOptimType, optimizer), getattr(PoolingMode, pooling), tables, seed=0)
    for batch in (4, 7, 4, 2):  # new shapes and a repeated one
        indices, offsets, _ = _batch(tables, batch, g)
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
    cpu, mt, g = _tbe_pair(getattr(EmbOptimType, optimizer), getattr(PoolingMode, pooling), tables, seed=1)

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


def test_a_row_wise_input_distributions_kjt_ops_of_new_batch_shapes_are_asynchronous():
    """Point 3's speed for the KJT ops of a row-wise input distribution, on
    every batch: block_bucketize_sparse_features (optional results: a plan
    holds a None) and permute_2D_sparse_data (its values' count given as a
    SymInt, which a family omits as it omits tensors' sizes) are planned by
    their meta functions after the first batch: no first call, queued behind
    a held stream; equal to CPU's."""
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    import openmtia._C_test

    fb = torch.ops.fbgemm
    g = torch.Generator().manual_seed(3)
    for i, batch in enumerate((3, 5, 4, 7)):
        lengths = torch.randint(0, 4, (2, batch), generator=g, dtype=torch.int32)
        total = int(lengths.sum())
        values, weights = torch.randint(0, 8, (total,), generator=g), torch.rand(total, generator=g)
        permute, blocks = torch.tensor([1, 0], dtype=torch.int32), torch.tensor([4, 4])
        expected = (fb.permute_2D_sparse_data(permute, lengths, values, weights, total),
                    fb.block_bucketize_sparse_features(lengths.flatten(), values, True, True, blocks, 2, weights))
        args = [t.to("mtia") for t in (permute, lengths, values, weights, blocks)]
        torch.mtia.synchronize()
        before = openmtia._C._plan_cache_stats()

        def run(permute, lengths, values, weights, blocks):
            return (fb.permute_2D_sparse_data(permute, lengths, values, weights, total),
                    fb.block_bucketize_sparse_features(lengths.flatten(), values, True, True, blocks, 2, weights))

        if i == 0:  # the first batch learns the plans, synchronously
            got = run(*args)
        else:
            gate = openmtia._C_test.launch_blocking_task(0, 20.0)
            try:
                got = run(*args)
                assert not torch.mtia.current_stream().query(), "a call waited for the stream"
            finally:
                gate.release()
            assert openmtia._C._plan_cache_stats()["first_calls"] == before["first_calls"], batch
        e_flat, e_spec = tree_flatten(expected)
        g_flat, g_spec = tree_flatten(got)
        assert g_spec == e_spec
        for e, m in zip(e_flat, g_flat):
            assert (e is None) == (m is None)
            if e is not None:
                torch.testing.assert_close(m.cpu(), e)


def test_fused_adam_is_refused_on_mtia_as_on_cpu():
    """FBGEMM runs MTIA's TBE through its CPU op schemas, which have no ADAM:
    its own check refuses it for both (fbgemm-gpu-cpu 1.8.0)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

    for device in ("cpu", "mtia"):
        with pytest.raises(AssertionError, match="Optimizer adam is not supported in CPU mode"):
            _tbe(device, EmbOptimType.ADAM, PoolingMode.SUM, [(10, 4)])


# ---------------------------------------------------------------- point 4: sharded training
sys.path.insert(0, os.path.dirname(__file__))
import recsys_workers  # noqa: E402


from test_distributed import PEER_DIED, spawn  # noqa: E402  (the ranks as processes, over loopback)


SHARDING_TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "grid_shard"]


def test_the_planner_offers_these_sharding_types_for_mtia():
    """TorchRec's EmbeddingBagCollectionSharder offers mtia every sharding type
    but data_parallel (its choice: torchrec 1.8.0 lists data_parallel for cpu
    and cuda only), each with the fused kernel: the sharded-training test
    covers each it offers."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    sharder = EmbeddingBagCollectionSharder()
    assert sorted(sharder.sharding_types("mtia")) == sorted(SHARDING_TYPES)
    for st in SHARDING_TYPES:
        assert sharder.compute_kernels(st, "mtia") == ["fused"], st


def test_sharded_training_on_two_ranks_equals_unsharded_cpu(tmp_path):
    """DistributedModelParallel on 2 mtia ranks, for each sharding type the
    planner offers: every table sharded that way by TorchRec's planner
    (Topology(compute_device="mtia")) with a fused EXACT_ADAGRAD. After 4
    steps the summed losses and every table (gathered whole) equal the same
    tables trained unsharded on CPU with torch's Adagrad over the global
    batch, from the same initial weights (recsys_workers.py); saved with
    torch.distributed.checkpoint, the model loads into a fresh one equal.
    (One process group for all: the ranks' start-up is most of a run's
    time.)"""
    spawn(recsys_workers.sharded, SHARDING_TYPES, str(tmp_path), timeout=400)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(SHARDING_TYPES)  # rank 0 compared each


def test_the_sparse_dist_pipeline_overlaps_input_distribution_with_compute(tmp_path):
    """TrainPipelineSparseDist on 2 mtia ranks: the next batch's input
    distribution runs on the pipeline's side streams while the default
    stream's compute is held, and the training equals unsharded CPU's
    (recsys_workers.pipelined)."""
    spawn(recsys_workers.pipelined, str(tmp_path))
    assert (tmp_path / "pipelined").exists()


def _outcomes(tmp_path, ranks):
    out = {}
    for r in ranks:
        elapsed, usable, outcome = (tmp_path / f"rank{r}").read_text().splitlines()
        out[r] = (float(elapsed), usable == "True", outcome)
    return out


def test_plans_that_differ_between_ranks_raise_on_every_rank_without_a_hang(tmp_path):
    spawn(recsys_workers.mismatched_plans, str(tmp_path), timeout=120)
    for rank, (elapsed, usable, outcome) in _outcomes(tmp_path, (0, 1)).items():
        assert re.search(r"(DistBackendError|AcceleratorError|RuntimeError): .*collective mismatch at call \d+ of this process group: "
                         r"rank \d called \w+", outcome), (rank, outcome)
        assert elapsed < 15, (rank, elapsed, outcome)  # the group's timeout is 10 s
        assert usable, rank


def test_a_rank_that_dies_makes_the_other_raise_within_the_timeout(tmp_path):
    spawn(recsys_workers.dead_rank, str(tmp_path), timeout=120)
    elapsed, usable, outcome = _outcomes(tmp_path, (0,))[0]
    assert re.match(PEER_DIED, outcome), outcome
    assert elapsed < 15, (elapsed, outcome)
    assert usable


from test_distributed_netns import run_in_namespaces, two_hosts  # noqa: E402,F401  (two network namespaces)


def test_sharded_training_across_two_network_namespaces(two_hosts, tmp_path):
    """The row-wise sharded training of the one-host test, one rank in each of
    two network namespaces (two hosts: Gloo over a veth pair), equal to
    unsharded CPU's."""
    master, port = two_hosts[0][2], 29614
    run_in_namespaces(two_hosts, lambda rank: f"import recsys_workers; recsys_workers.sharded({rank}, 2, {port}, "
                                              f"['row_wise'], {str(tmp_path)!r}, addr={master!r})",
                      "the two-host sharded run", timeout=300)
    assert (tmp_path / "row_wise").exists()  # rank 0 compared


# ---------------------------------------------------------------- point 5: quantized inference
QUANT_TABLES = [("t0", 64, 16), ("t1", 40, 16), ("t2", 100, 8), ("t3", 30, 8)]  # (name, rows, dim)


def _quant_model(device, collection="bag", seed=0):
    """An embedding (bag) collection, its float weights seeded, on `device`,
    in a model (quantization replaces a model's collections)."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
    torch.manual_seed(seed)
    if collection == "bag":
        return torch.nn.Sequential(EmbeddingBagCollection(device=torch.device(device), tables=[
            EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[f"f_{n}"])
            for n, r, d in QUANT_TABLES]))
    return torch.nn.Sequential(EmbeddingCollection(device=torch.device(device), tables=[  # unpooled: one dimension
        EmbeddingConfig(name=n, embedding_dim=8, num_embeddings=r, feature_names=[f"f_{n}"]) for n, r, _ in QUANT_TABLES]))


def _quant_batch(batch, g, bad_id=False):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    lengths = torch.randint(0, 4, (len(QUANT_TABLES) * batch,), generator=g)
    values = torch.cat([torch.randint(0, r, (int(n),), generator=g)
                        for (_, r, _), n in zip(QUANT_TABLES, lengths.view(len(QUANT_TABLES), batch).sum(1))])
    if bad_id:
        values[0] = 10_000  # out of t0's range: the bounds check's warning mode makes it row 0, on both
    return KeyedJaggedTensor(keys=[f"f_{n}" for n, _, _ in QUANT_TABLES], values=values, lengths=lengths)


def _quantize(module, dtype, output_dtype):
    """TorchRec's quantization of the model's collections (pooled, and the
    unpooled ones, which it quantizes when asked)."""
    from torchrec.inference.modules import quantize_embeddings
    from torchrec.modules.embedding_modules import EmbeddingCollection
    from torchrec.quant.embedding_modules import EmbeddingCollection as QuantEmbeddingCollection
    return quantize_embeddings(module, dtype=dtype, inplace=False, output_dtype=output_dtype,
                               additional_qconfig_spec_keys=[EmbeddingCollection],
                               additional_mapping={EmbeddingCollection: QuantEmbeddingCollection})


def _tbes(model):
    """The IntNBit TBEs of a quantized model (a quantized collection keeps
    them in a list, not as submodules)."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
    found = {}
    for m in model.modules():
        for t in [m, *getattr(m, "_emb_modules", [])]:
            if isinstance(t, IntNBitTableBatchedEmbeddingBagsCodegen):
                found[id(t)] = t
    return list(found.values())


def _outputs(out):
    """A KeyedTensor's or a dict of JaggedTensors' tensors, by key."""
    if hasattr(out, "to_dict") and not isinstance(out, dict):
        out = out.to_dict()
    return {k: (v if isinstance(v, torch.Tensor) else v.values()) for k, v in out.items()}


@pytest.mark.parametrize("collection", ["bag", "sequence"])
@pytest.mark.parametrize("dtype,output_dtype", [(torch.qint8, torch.float), (torch.quint4x2, torch.float),
                                                (torch.qint8, torch.half), (torch.half, torch.float)])
def test_quantized_embeddings_on_mtia_look_up_as_on_cpu(collection, dtype, output_dtype):
    """TorchRec's inference path: quantize_embeddings makes IntNBit
    table-batched embeddings, whose tables live in the device's memory
    (EmbeddingLocation.DEVICE) on mtia; every batch, the first and the later
    ones, one with an id out of range among them, looks up what CPU's
    quantized model looks up. Before openmtia translated the DEVICE placement
    for FBGEMM's kernel, the lookup raised "Expected placement !=
    PlacementType::DEVICE"."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    cpu = _quantize(_quant_model("cpu", collection), dtype, output_dtype)
    mt = _quantize(_quant_model("cpu", collection).to("mtia"), dtype, output_dtype)
    tbes = _tbes(mt)
    assert tbes and all(t.weights_dev.device.type == "mtia" and t.weights_dev.numel() > 0 for t in tbes)
    assert all(spec[4] == EmbeddingLocation.DEVICE for t in tbes for spec in t.embedding_specs)
    g = torch.Generator().manual_seed(1)
    for batch, bad in ((3, False), (5, True), (2, False), (7, False)):
        kjt = _quant_batch(batch, g, bad)
        expected = _outputs(cpu(kjt))
        got = _outputs(mt(kjt.to("mtia")))
        assert got.keys() == expected.keys()
        for k in expected:
            assert got[k].device.type == "mtia" and got[k].dtype == expected[k].dtype == output_dtype
            torch.testing.assert_close(got[k].cpu(), expected[k], atol=0, rtol=0)


def test_a_quantized_lookup_of_a_new_batch_shape_is_asynchronous_with_no_first_call():
    """Inference batches change shape too: after the first, the quantized
    lookup (and its bounds check, and the offsets' cumsum) are planned from
    openmtia's meta functions and queue behind a held stream."""
    import openmtia._C_test
    cpu = _quantize(_quant_model("cpu"), torch.qint8, torch.float)
    mt = _quantize(_quant_model("cpu").to("mtia"), torch.qint8, torch.float)
    g = torch.Generator().manual_seed(2)
    for i, batch in enumerate((4, 6, 3, 9)):
        kjt = _quant_batch(batch, g)
        expected = cpu(kjt).values()
        kjt = kjt.to("mtia")
        torch.mtia.synchronize()
        before = openmtia._C._plan_cache_stats()
        if i == 0:
            got = mt(kjt).values()
        else:
            gate = openmtia._C_test.launch_blocking_task(0, 20.0)
            try:
                got = mt(kjt).values()
                assert not torch.mtia.current_stream().query(), "a call waited for the stream"
            finally:
                gate.release()
            after = openmtia._C._plan_cache_stats()
            assert after["first_calls"] == before["first_calls"], (batch, before, after)
        torch.testing.assert_close(got.cpu(), expected, atol=0, rtol=0)


@pytest.mark.parametrize("sharding_type", ["table_wise", "row_wise", "column_wise"])
@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint4x2])
def test_sharded_quantized_inference_on_two_devices_looks_up_as_unsharded_cpu(sharding_type, dtype):
    """TorchRec's sharded inference: one process, the quantized tables sharded
    over mtia:0 and mtia:1 (shard_quant_model, world size 2), each device
    looking up its shards and the pooled embeddings gathered onto mtia:0
    (fbgemm's merge_pooled_embeddings, native on mtia). The outputs equal the
    unsharded quantized model's on CPU, key by key. Stock TorchRec 1.8.0 with
    FBGEMM 1.8.0 could not build the shards on mtia ("EmbeddingLocation.HOST
    doesn't work for CUDA device!"), and the gather raised "Expected all
    tensors to be on the same device"."""
    import copy

    import torchrec.distributed.global_settings as settings
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.inference.modules import shard_quant_model
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.quant.embedding_modules import quant_prep_enable_quant_state_dict_split_scale_bias_for_types

    def prepared(device):
        model = _quant_model("cpu").to(device)
        quant_prep_enable_quant_state_dict_split_scale_bias_for_types(model, [EmbeddingBagCollection])
        return _quantize(model, dtype, torch.float)

    cpu, mt = prepared("cpu"), prepared("mtia")
    propagate = settings.get_propogate_device()
    settings.set_propogate_device(True)  # TorchRec's switch for devices other than CUDA (CPU's inference needs it too)
    try:
        constraints = {n: ParameterConstraints(sharding_types=[sharding_type], compute_kernels=["quant"])
                       for n, _, _ in QUANT_TABLES}
        sharded, plan = shard_quant_model(copy.deepcopy(mt), world_size=2, compute_device="mtia",
                                          sharding_device="mtia", constraints=constraints)
    finally:
        settings.set_propogate_device(propagate)
    loaded = sharded.load_state_dict(mt.state_dict(), strict=False)  # (the TBEs' own buffers are not in it)
    assert not loaded.unexpected_keys and all(".tbes." in k for k in loaded.missing_keys), loaded
    devices = {t.weights_dev.device for t in _tbes(sharded)}
    assert devices == {torch.device("mtia", 0), torch.device("mtia", 1)}, devices
    g = torch.Generator().manual_seed(3)
    for batch in (4, 7, 2):
        kjt = _quant_batch(batch, g)
        expected = _outputs(cpu(kjt))
        got = _outputs(sharded(kjt.to("mtia:0")))
        assert sorted(got) == sorted(expected)
        for k in expected:
            assert got[k].device == torch.device("mtia", 0)
            torch.testing.assert_close(got[k].cpu(), expected[k], atol=0, rtol=0)


def test_merge_pooled_embeddings_gathers_from_devices_as_on_cpu():
    """fbgemm's gather ops over several devices: onto mtia:0 (asynchronous
    device-to-device copies), and onto CPU; a wrong size raises at the call."""
    import fbgemm_gpu  # noqa: F401
    fb = torch.ops.fbgemm
    a, b = torch.randn(3, 4), torch.randn(3, 2)
    on = [a.to("mtia:0"), b.to("mtia:1")]
    for target in (torch.device("mtia", 0), torch.device("cpu")):
        merged = fb.merge_pooled_embeddings(on, 3, target, 1)
        assert merged.device == target
        torch.testing.assert_close(merged.cpu(), torch.cat([a, b], 1), atol=0, rtol=0)
    rows = fb.merge_pooled_embeddings([a.t().contiguous().to("mtia:1"), b.t().contiguous().to("mtia:0")], 3,
                                      torch.device("mtia", 1), 0)
    torch.testing.assert_close(rows.cpu(), torch.cat([a.t(), b.t()], 0), atol=0, rtol=0)
    moved = fb.all_to_one_device(on, torch.device("mtia", 1))
    assert [t.device for t in moved] == [torch.device("mtia", 1)] * 2
    torch.testing.assert_close(moved[0].cpu(), a, atol=0, rtol=0)
    summed = fb.sum_reduce_to_one([a.to("mtia:0"), a.to("mtia:1")], torch.device("mtia", 0))
    torch.testing.assert_close(summed.cpu(), a + a, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="merge_pooled_embeddings: a pooled embedding has size 3 in dimension 0, "
                                           "expected 5"):
        fb.merge_pooled_embeddings(on, 5, torch.device("mtia", 0), 1)


# ---------------------------------------------------------------- point 8: bad input
def _ebc(device):
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    torch.manual_seed(0)
    return EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name="t0", embedding_dim=4, num_embeddings=10, feature_names=["f0"]),
        EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=5, feature_names=["f1"])],
        device=torch.device(device))


def _kjt(values, lengths):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    return KeyedJaggedTensor(keys=["f0", "f1"], values=torch.tensor(values), lengths=torch.tensor(lengths))


def _still_works(cpu, mt):
    kjt = _kjt([1, 2, 3, 4], [2, 1, 1, 0])
    torch.testing.assert_close(mt(kjt.to("mtia")).values().cpu(), cpu(kjt).values())


def test_an_id_out_of_a_tables_range_raises_as_on_cpu_at_the_next_sync():
    cpu, mt = _ebc("cpu"), _ebc("mtia")
    mt.load_state_dict(cpu.state_dict())
    _still_works(cpu, mt)  # (the lookups' signatures are known: none waits for the stream below)
    bad = lambda: _kjt([1, 2, 12, 3], [2, 1, 1, 0])  # 12: table t0 has 10 rows (a KJT each: it caches)
    with pytest.raises(RuntimeError, match="Expected i < index_size"):
        cpu(bad())
    out = mt(bad().to("mtia"))  # the ids live on the device: as CUDA's device-side assert, not known at the call
    with pytest.raises(RuntimeError, match=r"^openmtia: asynchronous task 'aten::_embedding_bag\w*' failed on mtia:0 "
                                           r"stream \d+: Index 2 of input takes value 12 which is not in the valid "
                                           r"range \[0, 10\)$") as info:  # (once, and no C++ backtrace)
        torch.mtia.synchronize()
    del out
    _still_works(cpu, mt)


def test_lengths_that_do_not_sum_to_the_values_count_raise_at_the_call_as_on_cpu():
    cpu, mt = _ebc("cpu"), _ebc("mtia")
    mt.load_state_dict(cpu.state_dict())
    bad = lambda: _kjt([1, 2, 3, 3], [2, 1, 3, 0])  # 6 ids by the lengths, 4 values
    message = r"split_with_sizes expects split_sizes to sum exactly to 4 .* but got split_sizes=\[3, 3\]"
    with pytest.raises(RuntimeError, match=message):
        cpu(bad())
    with pytest.raises(RuntimeError, match=message):
        mt(bad().to("mtia"))
    _still_works(cpu, mt)


def test_a_kjt_on_the_wrong_device_raises_at_the_call_as_on_cuda():
    cpu, mt = _ebc("cpu"), _ebc("mtia")
    mt.load_state_dict(cpu.state_dict())
    kjt = lambda: _kjt([1, 2, 3, 3], [2, 1, 1, 0])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, (mtia:0 and cpu|cpu and mtia:0)"):
        mt(kjt())
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, (mtia:0 and cpu|cpu and mtia:0)"):
        cpu(kjt().to("mtia"))
    _still_works(cpu, mt)
