"""Per-rank bodies of the TorchRec tests (tests/test_recsys.py, issue 42).

Each runs in its own process, one mtia device per rank, over loopback (or the
test's network namespaces): sharded embedding tables (DistributedModelParallel)
trained on mtia, checked against the same model trained unsharded on CPU.
"""
import os

import torch
import torch.distributed as dist

import dist_workers  # the process group's setup (tests/dist_workers.py)

TABLES = [("t0", 60, 8), ("t1", 40, 8), ("t2", 80, 4)]  # name, rows, dim
FEATURES = {"t0": "f0", "t1": "f1", "t2": "f2"}
LR, EPS, STEPS, BATCH = 0.05, 1e-4, 4, 5  # per rank


def tables():
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    return [EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[FEATURES[n]])
            for n, r, d in TABLES]


def initial_weights():
    g = torch.Generator().manual_seed(7)
    return {n: torch.randn(r, d, generator=g) for n, r, d in TABLES}


def batches(world):
    """STEPS global batches: per step, a KJT per rank (BATCH samples each)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    g = torch.Generator().manual_seed(11)
    out = []
    for step in range(STEPS):
        per_rank = []
        for r in range(world):
            lengths, values = [], []
            for n, rows, _ in TABLES:
                ls = torch.randint(0, 4, (BATCH,), generator=g)
                lengths.append(ls)
                values.append(torch.randint(0, rows, (int(ls.sum()),), generator=g))
            per_rank.append(KeyedJaggedTensor(keys=[FEATURES[n] for n, _, _ in TABLES], values=torch.cat(values),
                                              lengths=torch.cat(lengths)))
        out.append(per_rank)
    return out


def targets(world):
    g = torch.Generator().manual_seed(13)
    dim = sum(d for _, _, d in TABLES)
    return [[torch.randn(BATCH, dim, generator=g) for _ in range(world)] for _ in range(STEPS)]


def loss_of(pooled, target):
    """pooled: the KeyedTensor (its keys' order is the sharding's: by name)."""
    d = pooled.to_dict()
    return (torch.cat([d[FEATURES[n]] for n, _, _ in TABLES], dim=1) - target).pow(2).sum()


def reference(world):
    """The same model trained unsharded on CPU over the global batch, with
    torch's Adagrad: each table's gradient is the mean over the ranks of
    their losses' gradients, as TorchRec makes it for every sharding type
    (TorchRec on CPU with Gloo gives the same). The summed losses per step
    and the final tables."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    ebc = EmbeddingBagCollection(tables=tables(), device=torch.device("cpu"))
    w0 = initial_weights()
    for n, _, _ in TABLES:
        ebc.embedding_bags[n].weight.data.copy_(w0[n])
    opt = torch.optim.Adagrad(ebc.parameters(), lr=LR, eps=EPS)
    losses = []
    for kjts, tgts in zip(batches(world), targets(world)):
        opt.zero_grad()
        total = sum(loss_of(ebc(k), t) for k, t in zip(kjts, tgts))
        (total / world).backward()
        opt.step()
        losses.append(total.item())
    return losses, {n: ebc.embedding_bags[n].weight.detach().clone() for n, _, _ in TABLES}


def sharded_model(module, world, dev, sharding_type, device_type="mtia", plan_alone=False):
    """`module` (built on meta) under DistributedModelParallel, each table
    sharded as `sharding_type` by TorchRec's planner with a fused
    EXACT_ADAGRAD, its tables set to initial_weights(); and its optimizer."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingEnv

    constraints = {n: ParameterConstraints(sharding_types=[sharding_type], compute_kernels=["fused"])
                   for n, _, _ in TABLES}
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_ADAGRAD,
                                                          "learning_rate": LR, "eps": EPS})
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=world, compute_device=device_type),
                                       constraints=constraints)
    if plan_alone:  # (each rank its own plan: they may differ)
        plan = planner.plan(module, [sharder])
    else:
        plan = planner.collective_plan(module, [sharder], dist.GroupMember.WORLD)
    for param_plan in plan.plan.values():
        for n, p in param_plan.items():
            assert p.sharding_type == sharding_type, (n, p)
    model = DistributedModelParallel(module, device=dev, plan=plan, sharders=[sharder],
                                     env=ShardingEnv.from_process_group(dist.GroupMember.WORLD))
    w0 = initial_weights()  # each rank writes its shards
    for key, t in model.state_dict().items():
        name = key.split(".")[-2]
        for shard in t.local_shards():
            o, sz = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(w0[name][o[0]:o[0] + sz[0], o[1]:o[1] + sz[1]])
    return model, model.fused_optimizer


def gathered_tables(model, rank, dev):
    """Every table whole on rank 0 (ShardedTensor.gather)."""
    final = {}
    for key, t in model.state_dict().items():
        out = torch.empty(t.size(), device=dev) if rank == 0 else None
        t.gather(dst=0, out=out)
        final[key.split(".")[-2]] = out
    return final


def check_against_reference(world, losses, final, device_type):
    ref_losses, ref_tables = reference(world)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-4)
    for n, _, _ in TABLES:
        assert final[n].device.type == device_type, (n, final[n].device)
        torch.testing.assert_close(final[n].cpu(), ref_tables[n], rtol=1e-5, atol=1e-5, msg=lambda m: f"{n}: {m}")


def init(rank, world, port, addr, device_type):
    if device_type == "mtia":
        return dist_workers.init(rank, world, port, addr=addr)
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port))  # (the same run on CPU with Gloo)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return torch.device("cpu")


def sharded(rank, world, port, sharding_types, result_dir, addr="127.0.0.1", device_type="mtia"):
    """DistributedModelParallel over `world` ranks, for each of
    `sharding_types` (in one process group): every table sharded that way,
    trained STEPS steps; rank 0 checks the losses and the tables against
    reference(), and that the model saved with torch.distributed.checkpoint
    loads into a fresh one equal; it writes a file named after the sharding
    type."""
    import torch.distributed.checkpoint as dcp
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dev = init(rank, world, port, addr, device_type)
    for sharding_type in sharding_types:
        ebc = EmbeddingBagCollection(tables=tables(), device=torch.device("meta"))
        model, opt = sharded_model(ebc, world, dev, sharding_type, device_type)
        losses = []
        for kjts, tgts in zip(batches(world), targets(world)):
            opt.zero_grad()
            loss = loss_of(model(kjts[rank].to(dev)), tgts[rank].to(dev))
            loss.backward()
            opt.step()
            t = loss.detach().clone()
            dist.all_reduce(t)
            losses.append(t.item())
        final = gathered_tables(model, rank, dev)
        # saved with torch.distributed.checkpoint (each rank its shards) and
        # loaded into a fresh sharded model: the same tables (a table-wise
        # table has no shard on one of the ranks)
        path = [os.path.join(result_dir, f"dcp-{sharding_type}")]
        dcp.save(model.state_dict(), checkpoint_id=path[0])
        fresh, _ = sharded_model(EmbeddingBagCollection(tables=tables(), device=torch.device("meta")), world, dev,
                                 sharding_type, device_type)
        state = fresh.state_dict()
        dcp.load(state, checkpoint_id=path[0])
        fresh.load_state_dict(state)
        reloaded = gathered_tables(fresh, rank, dev)
        if rank == 0:
            try:
                check_against_reference(world, losses, final, device_type)
                for n, _, _ in TABLES:
                    assert torch.equal(reloaded[n].cpu(), final[n].cpu()), f"{n}: reloaded from the checkpoint differs"
            except AssertionError as e:
                raise AssertionError(f"{sharding_type}: {e}") from None
            with open(os.path.join(result_dir, sharding_type), "w") as f:
                f.write(repr(losses))
        dist.barrier()
    dist.destroy_process_group()


class Trained(torch.nn.Module):
    """The embedding tables with their loss: what TrainPipelineSparseDist
    trains (its forward takes a torchrec Batch and returns (loss, output))."""

    def __init__(self, ebc):
        super().__init__()
        self.ebc = ebc

    def forward(self, batch):
        loss = loss_of(self.ebc(batch.sparse_features), batch.dense_features)
        return loss, loss.detach()


def pipelined(rank, world, port, result_dir, addr="127.0.0.1"):
    """TrainPipelineSparseDist over the row-wise sharded tables on mtia: the
    next batch's input distribution runs on the pipeline's side streams while
    this batch's compute is queued on the default stream. The check: with
    the default stream held (a gate task), a whole progress() call returns
    and the side stream's work for the next batch completes; nothing waits
    for the held stream. The losses and tables equal reference()'s."""
    import openmtia._C_test
    from torchrec.datasets.utils import Batch
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dev = init(rank, world, port, addr, "mtia")
    module = Trained(EmbeddingBagCollection(tables=tables(), device=torch.device("meta")))
    model, opt = sharded_model(module, world, dev, "row_wise")
    data = [Batch(dense_features=tgts[rank], sparse_features=kjts[rank], labels=torch.zeros(BATCH))
            for kjts, tgts in zip(batches(world), targets(world))]
    pipeline = TrainPipelineSparseDist(model, opt, dev, execute_all_batches=True)
    it = iter(data)
    outputs = [pipeline.progress(it) for _ in range(2)]
    gate = openmtia._C_test.launch_blocking_task(dev.index, 30.0)  # the default stream's compute is held
    try:
        outputs.append(pipeline.progress(it))  # batch 2; batch 3's input distribution starts
        pipeline._data_dist_stream.synchronize()
        pipeline._memcpy_stream.synchronize()
        held = not torch.mtia.current_stream().query()
    finally:
        gate.release()
    assert held, "the default stream ran past the gate: something waited for it"
    outputs.append(pipeline.progress(it))
    losses = []
    for out in outputs:
        t = out.clone()
        dist.all_reduce(t)
        losses.append(t.item())
    final = gathered_tables(model, rank, dev)
    if rank == 0:
        check_against_reference(world, losses, final, "mtia")
        with open(os.path.join(result_dir, "pipelined"), "w") as f:
            f.write(repr(losses))
    dist.barrier()
    dist.destroy_process_group()


def mismatched_plans(rank, world, port, result_dir):
    """Each rank plans on its own (EmbeddingShardingPlanner.plan, not
    collective_plan) with other constraints: rank 0 shards the tables
    table-wise, rank 1 row-wise. Training must raise on every rank, within
    the group's timeout (10 s here), never hang; the device stays usable."""
    import time

    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dev = dist_workers.init(rank, world, port, timeout_s=10)
    t0 = time.perf_counter()
    try:
        ebc = EmbeddingBagCollection(tables=tables(), device=torch.device("meta"))
        model, opt = sharded_model(ebc, world, dev, "table_wise" if rank == 0 else "row_wise", plan_alone=True)
        for kjts, tgts in zip(batches(world), targets(world)):
            loss = loss_of(model(kjts[rank].to(dev)), tgts[rank].to(dev))
            loss.backward()
            opt.step()
        torch.mtia.synchronize()
        outcome = "no error"
    except Exception as e:  # noqa: BLE001  (the outcome is the test's to check)
        outcome = f"{type(e).__name__}: {e}".replace("\n", " ")
    elapsed = time.perf_counter() - t0
    usable = (torch.ones(3, device=dev) * 2).sum().item() == 6.0
    with open(os.path.join(result_dir, f"rank{rank}"), "w") as f:
        f.write(f"{elapsed}\n{usable}\n{outcome}\n")
    dist.destroy_process_group()


def dead_rank(rank, world, port, result_dir):
    """Rank 1 dies after two training steps; rank 0's next step raises
    within the group's timeout (10 s), and its device stays usable."""
    import time

    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dev = dist_workers.init(rank, world, port, timeout_s=10)
    ebc = EmbeddingBagCollection(tables=tables(), device=torch.device("meta"))
    model, opt = sharded_model(ebc, world, dev, "row_wise")
    steps = list(zip(batches(world), targets(world)))

    def step(kjts, tgts):
        loss = loss_of(model(kjts[rank].to(dev)), tgts[rank].to(dev))
        loss.backward()
        opt.step()
        return loss.item()

    for kjts, tgts in steps[:2]:
        step(kjts, tgts)
    if rank == 1:
        os._exit(0)  # dies without a word to the group
    time.sleep(0.5)
    t0 = time.perf_counter()
    try:
        step(*steps[2])
        outcome = "no error"
    except Exception as e:  # noqa: BLE001  (the outcome is the test's to check)
        outcome = f"{type(e).__name__}: {e}".replace("\n", " ")
    elapsed = time.perf_counter() - t0
    usable = (torch.ones(3, device=dev) * 2).sum().item() == 6.0
    with open(os.path.join(result_dir, "rank0"), "w") as f:
        f.write(f"{elapsed}\n{usable}\n{outcome}\n")
    dist.destroy_process_group()
