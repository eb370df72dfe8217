"""A DLRM trained with TorchRec on mtia: it learns who clicks what.

The data is made here, by a fixed seed: users and items with hidden factors
(a click's log-odds are their dot product, plus the effect of 4 dense
features), user and item ids drawn with power-law frequencies (a few are
very common, most are rare, as in real logs), each sample with its user, its
item, the item's category and the user's recent items (a bag of 1-5). A
model that learns the factors beats 0.5 held-out AUC clearly; a broken one
does not. TorchRec's DLRM trains on it: its embedding tables sharded by
TorchRec's planner (DistributedModelParallel, a fused row-wise Adagrad in
FBGEMM's table-batched kernels), batches fed by TrainPipelineSparseDist (the
next batch's input distribution overlaps this one's compute), the dense part
with Adagrad. Then it reports held-out AUC (torchmetrics), saves a
checkpoint with torch.distributed.checkpoint, loads it into a fresh sharded
model (which must predict the same) and draws the learning curve.

    python examples/dlrm.py                  # on mtia (one process)
    python examples/dlrm.py --device cpu     # the reference run
    python examples/dlrm.py --check          # + the CPU twin: its AUC must match
    torchrun --standalone --nproc-per-node 2 examples/dlrm.py   # 2 ranks, tables sharded
    ... --checkpoint DIR --checkpoint-every 50   # save every 50 steps; resume from DIR's newest
"""
import argparse
import datetime
import logging
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (also when imported from elsewhere)
from checkpoints import latest_checkpoint  # examples/checkpoints.py  # noqa: E402
from progress import Progress  # examples/progress.py  # noqa: E402


class _TorchFxTracingAdvice(logging.Filter):
    """torch 2.13's own ProxyableClassMeta (the metaclass of TorchRec's
    KeyedJaggedTensor) calls torch's deprecated is_fx_tracing() at every
    construction, which logs, once, advice for callers of is_fx_tracing():
    this program calls it nowhere, so that one message is dropped."""

    def filter(self, record):
        return not record.getMessage().startswith("is_fx_tracing will return true")


logging.getLogger("torch.fx._symbolic_trace").addFilter(_TorchFxTracingAdvice())


class _TorchRecGroupNotices(logging.Filter):
    """TorchRec 1.8's table-row-wise and grid sharding make intra- and
    cross-node process groups and log each (and that no pod size was set) as
    a warning: notices about its own groups that ask nothing of the program.
    (fbgemm_gpu's import configures the root logger, so they print.)"""

    def filter(self, record):
        return not record.getMessage().startswith(("[Connection]", "TORCHREC_RESOLVED_POD_SIZE not set"))


logging.getLogger("torchrec.distributed.comm").addFilter(_TorchRecGroupNotices())
# TorchRec 1.8's row-wise output distribution (torchrec/distributed/comm_ops.py)
# calls the collectives torch 2.13 renamed; its callers cannot choose the new
# ones. Only these two notices, and only from torch's c10d logger, are dropped.
warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed.c10d_logger",
                        message=r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor)` is deprecated")

TABLES = [  # name, rows, features (one table may serve several features)
    ("user_table", 20_000, ["user"]),
    ("item_table", 8_000, ["item", "history"]),
    ("category_table", 64, ["category"]),
]
DENSE = 4
DIM = 16


def make_data(n, seed):
    """n samples: dense features [n, 4], ids per feature (lengths, values),
    and labels drawn from the hidden factors."""
    g = torch.Generator().manual_seed(seed)
    users, items, cats = TABLES[0][1], TABLES[1][1], TABLES[2][1]
    hidden = torch.Generator().manual_seed(1234)  # the same world for every split
    user_f = torch.randn(users, 8, generator=hidden)
    item_f = torch.randn(items, 8, generator=hidden)
    item_cat = torch.randint(0, cats, (items,), generator=hidden)
    dense_w = torch.randn(DENSE, generator=hidden) * 0.5

    def power_law(rows, k):  # id r drawn with probability proportional to 1 / (r + 1)^1.1
        p = 1.0 / torch.arange(1, rows + 1, dtype=torch.float64) ** 1.1
        return torch.multinomial(p, k, replacement=True, generator=g)

    user, item = power_law(users, n), power_law(items, n)
    hist_len = torch.randint(1, 6, (n,), generator=g)
    history = power_law(items, int(hist_len.sum()))
    dense = torch.randn(n, DENSE, generator=g)
    logit = 1.5 * (user_f[user] * item_f[item]).sum(1) / 8 ** 0.5 + dense @ dense_w - 0.5
    labels = torch.bernoulli(torch.sigmoid(logit), generator=g)
    ones = torch.ones(n, dtype=torch.long)
    features = {"user": (ones, user), "item": (ones, item), "category": (ones, item_cat[item]),
                "history": (hist_len, history)}
    return dense, features, labels


def batches(data, batch_size, rank, world):
    """The data in global batches, each rank's share as a torchrec Batch."""
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    dense, features, labels = data
    n = labels.numel()
    offsets = {k: torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]) for k, (lens, _) in features.items()}
    per_rank = batch_size // world
    for start in range(0, n - batch_size + 1, batch_size):
        lo = start + rank * per_rank
        hi = lo + per_rank
        keys, lengths, values = [], [], []
        for k, (lens, vals) in features.items():
            keys.append(k)
            lengths.append(lens[lo:hi])
            values.append(vals[offsets[k][lo]:offsets[k][hi]])
        kjt = KeyedJaggedTensor(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))
        yield Batch(dense_features=dense[lo:hi], sparse_features=kjt, labels=labels[lo:hi])


def build(device, world, seed, sharding=None):
    """TorchRec's DLRM, made on CPU by `seed` (so every device and rank count
    starts from the same weights), sharded by TorchRec's planner over the
    process group; and its optimizer (the fused one of the tables, Adagrad
    for the dense part)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
    from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
    from torchrec.distributed.types import ShardingEnv
    from torchrec.models.dlrm import DLRM, DLRMTrain
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper

    configs = [EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=rows, feature_names=f)
               for n, rows, f in TABLES]

    def model(on):
        ebc = EmbeddingBagCollection(tables=configs, device=torch.device(on))
        return DLRMTrain(DLRM(embedding_bag_collection=ebc, dense_in_features=DENSE,
                              dense_arch_layer_sizes=[32, DIM], over_arch_layer_sizes=[32, 16, 1],
                              dense_device=torch.device(on)))

    torch.manual_seed(seed)
    initial = model("cpu").state_dict()
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                                                          "learning_rate": 0.05, "eps": 1e-8})
    sharding = sharding or planner_sharding_types(sharder.sharding_types(device.type))
    constraints = {n: ParameterConstraints(compute_kernels=["fused"], sharding_types=sharding) for n, _, _ in TABLES}
    topology = TopologyFactory.create_topology(TrainerConfig(world_size=world),
                                               kernel_config=KernelConfig(compute_device=device.type))
    # 15% of each device's memory kept for the dense part and the batches (the
    # planner's default share; its heuristic reservation is deprecated)
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints,
                                       storage_reservation=FixedPercentageStorageReservation(percentage=0.15))
    unsharded = model("meta")
    plan = planner.collective_plan(unsharded, [sharder], dist.GroupMember.WORLD)
    # the tables' state as DTensors (ShardedTensor is deprecated), which
    # torch.distributed.checkpoint saves and loads
    env = ShardingEnv(dist.get_world_size(), dist.get_rank(), dist.GroupMember.WORLD, output_dtensor=True)
    dmp = DistributedModelParallel(unsharded, device=device, plan=plan, sharders=[sharder], env=env,
                                   data_parallel_wrapper=DenseDataParallel())
    load_full(dmp, initial)
    fused = set(dmp.fused_optimizer.params)
    dense = {k: p for k, p in dmp.named_parameters() if p.requires_grad and k not in fused}
    optimizer = CombinedOptimizer([dmp.fused_optimizer,
                                   KeyedOptimizerWrapper(dense, lambda ps: torch.optim.Adagrad(ps, lr=0.05))])
    return dmp, optimizer, plan


def planner_sharding_types(offered):
    """The sharding types the planner may pick when --sharding does not say:
    those the sharder offers but two.
    - data_parallel: every table takes FBGEMM's fused kernel (on CPU the
      planner would also offer data-parallel tables with a dense optimizer:
      the CPU twin would then train another model).
    - table_column_wise: TorchRec 1.8 cannot give such a table's state as a
      DTensor on a rank that holds no shard of it
      (create_global_tensor_shape_stride_from_metadata has no case for it:
      that rank's DTensor.from_local raises "Found shape:None"), and the
      planner's choice among the types it may pick varies from run to run."""
    return [t for t in offered if t not in ("data_parallel", "table_column_wise")]


def DenseDataParallel():
    """DDP over the model's dense part, as TorchRec's default wrapper makes it,
    but with torch's forward_sync_buffers for its deprecated broadcast_buffers
    (the model has no buffers: the same model either way)."""
    from torch.nn.parallel import DistributedDataParallel
    from torchrec.distributed.model_parallel import DefaultDataParallelWrapper

    class Wrapper(DefaultDataParallelWrapper):
        def _ddp_wrap(self, dmp, env, device, ddp_ignore_param_names):
            if not set(dict(dmp.named_parameters())) - ddp_ignore_param_names:
                return
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                module=dmp._dmp_wrapped_module, params_and_buffers_to_ignore=ddp_ignore_param_names)
            dmp._dmp_wrapped_module = DistributedDataParallel(
                dmp._dmp_wrapped_module.to(device), device_ids=None if device.type == "cpu" else [device],
                process_group=env.process_group, gradient_as_bucket_view=True, forward_sync_buffers=False,
                static_graph=self._static_graph, bucket_cap_mb=self._bucket_cap_mb)

    return Wrapper()


def load_full(dmp, full):
    """Copies whole (unsharded) tensors into the sharded model: each rank its
    shards of a table, every rank the dense part."""
    by_suffix = {k.split("model.", 1)[-1]: v for k, v in full.items()}
    from torch.distributed.tensor import DTensor

    for key, t in dmp.state_dict().items():
        src = by_suffix[key.split("model.", 1)[-1]]
        if isinstance(t, DTensor):  # a table: its local shards (TorchRec's LocalShardsWrapper) and their offsets
            local = t.to_local()
            for shard, o in zip(local.local_shards(), local.local_offsets()):
                shard.copy_(src[o[0]:o[0] + shard.shape[0], o[1]:o[1] + shard.shape[1]])
        elif hasattr(t, "local_shards"):
            for shard in t.local_shards():
                o, s = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.copy_(src[o[0]:o[0] + s[0], o[1]:o[1] + s[1]])
        else:
            t.copy_(src)


def predict(dmp, data, batch_size, rank, world, device):
    """Held-out predictions (probabilities) and labels, of every rank's share, gathered."""
    dmp.eval()
    preds, labels = [], []
    with torch.no_grad():
        for b in batches(data, batch_size, rank, world):
            b = b.to(device)
            _, (_, logits, y) = dmp(b)
            preds.append(torch.sigmoid(logits))
            labels.append(y)
    dmp.train()
    p, y = torch.cat(preds), torch.cat(labels)
    if world > 1:
        ps, ys = [torch.empty_like(p) for _ in range(world)], [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(ps, p)
        dist.all_gather(ys, y)
        p, y = torch.stack(ps, 1).flatten(), torch.stack(ys, 1).flatten()
    return p.cpu(), y.cpu()


def auc(preds, labels):
    from torchmetrics.functional.classification import binary_auroc
    return binary_auroc(preds, labels.long()).item()


def save_checkpoint(path, dmp, optimizer, step, rank, progress):
    """A checkpoint after `step` steps: the sharded model and optimizer (the
    tables' fused row-wise Adagrad state, the dense Adagrad's) with
    torch.distributed.checkpoint, each rank its shards; the losses, the AUC
    curve and this rank's predictions since its last point in a file of the
    rank's own, written first (DCP's metadata, last, marks it complete)."""
    import torch.distributed.checkpoint as dcp

    os.makedirs(path, exist_ok=True)
    torch.save(progress, os.path.join(path, f"progress_rank{rank}.pt"))
    dcp.save({"model": dmp.state_dict(), "optim": optimizer.state_dict(), "step": torch.tensor(step)},
             checkpoint_id=path)


def load_checkpoint(path, dmp, optimizer, rank):
    """Restores what save_checkpoint saved; returns (step, progress)."""
    import torch.distributed.checkpoint as dcp

    state = {"model": dmp.state_dict(), "optim": optimizer.state_dict(), "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=path)
    dmp.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    return int(state["step"]), torch.load(os.path.join(path, f"progress_rank{rank}.pt"))


def train(args, device, rank, world, verbose=True):
    """Trains a fresh model (or resumes it from the newest checkpoint in
    --checkpoint); returns it, its per-step losses, its progressive AUC (each
    window's predictions, made before the window's updates), the samples/s
    (median step after warm-up) and the held-out data."""
    import itertools

    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

    dmp, optimizer, plan = build(device, world, args.seed, args.sharding or None)
    if verbose and rank == 0:
        kinds = sorted({p.sharding_type for m in plan.plan.values() for p in m.values()})
        print(f"tables sharded over {world} rank(s) by TorchRec's planner: {', '.join(kinds)}; "
              f"fused EXACT_ROWWISE_ADAGRAD")
    train_data = make_data(args.samples, seed=args.seed + 1)
    held = make_data(args.held_out, seed=args.seed + 2)
    steps = args.samples // args.batch_size
    losses, curve, times, cpu_times, window = [], [], [], [], []
    first = 0
    ckpt_dir, ckpt_every = getattr(args, "checkpoint", None), getattr(args, "checkpoint_every", 0)
    resume = latest_checkpoint(ckpt_dir) if verbose else None  # (the CPU twin starts afresh)
    if resume:  # a restarted job: the model, optimizer and curve as they were after that step
        first, progress = load_checkpoint(resume, dmp, optimizer, rank)
        losses, curve, window = progress["losses"], progress["curve"], progress["window"]
        if rank == 0:
            print(f"resumed from {resume}: step {first} of {steps}")
    pipeline = TrainPipelineSparseDist(dmp, optimizer, device, execute_all_batches=True)
    # the batches from the first not yet trained (the pipeline reads ahead: it
    # holds the next batch's input distribution, never its update)
    it = itertools.islice(batches(train_data, args.batch_size, rank, world), first, None)
    bar = Progress(steps, f"train on {device.type}", done=first) if verbose and rank == 0 else None
    every = max(1, steps // 8)
    for step in range(first, steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss, logits, labels = pipeline.progress(it)
        if world > 1:
            loss = loss.clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        value = loss.item()  # a sync: the step's time is its full time
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)  # (this process's threads: the host's, and an emulated device's)
        losses.append(value)
        window.append((torch.sigmoid(logits).cpu(), labels.cpu()))
        if (step + 1) % every == 0:
            curve.append((step + 1, auc(torch.cat([p for p, _ in window]), torch.cat([y for _, y in window]))))
            window = []
        if bar:
            bar.update(loss=f"{value:.4f}", samples_s=f"{args.batch_size / times[-1]:,.0f}")
        if ckpt_dir and verbose and ckpt_every and (step + 1) % ckpt_every == 0 and step + 1 < steps:
            save_checkpoint(os.path.join(ckpt_dir, f"step_{step + 1:06d}"), dmp, optimizer, step + 1, rank,
                            {"losses": losses, "curve": curve, "window": window})
    if bar:
        bar.close()
    pipeline.detach()  # the model's own forward again (the pipeline had rewritten it)
    warm = sorted(times[10:] or times)
    cpu = sorted(cpu_times[10:] or cpu_times)
    step_s, cpu_s = warm[len(warm) // 2], cpu[len(cpu) // 2]
    # (the median step, and the median CPU time of a step with how many of
    # the host's cores it kept busy)
    return dmp, losses, curve, args.batch_size / step_s, held, (cpu_s, cpu_s / step_s)


def checkpoint_roundtrip(dmp, args, device, rank, world, held):
    """Saves the model with torch.distributed.checkpoint (each rank its
    shards), loads it into a fresh sharded model, which must predict exactly
    what the trained one does."""
    import torch.distributed.checkpoint as dcp

    directory = [tempfile.mkdtemp(prefix="dlrm-dcp-") if rank == 0 else None]
    if world > 1:
        dist.broadcast_object_list(directory, src=0)
    dcp.save(dmp.state_dict(), checkpoint_id=directory[0])
    fresh, _, _ = build(device, world, args.seed + 100)  # other initial weights
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=directory[0])
    fresh.load_state_dict(state)
    mine, _ = predict(dmp, held, args.batch_size, rank, world, device)
    theirs, _ = predict(fresh, held, args.batch_size, rank, world, device)
    return directory[0], torch.equal(mine, theirs)


SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel")


def sharding_types(text):
    """--sharding: the listed types (an unknown one is an argument error)."""
    kinds = [k for k in text.split(",") if k]
    unknown = [k for k in kinds if k not in SHARDING_TYPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sharding type {', '.join(unknown)} "
                                         f"(one of {', '.join(SHARDING_TYPES)})")
    return kinds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="mtia")
    p.add_argument("--samples", type=int, default=262_144, help="training samples (one epoch)")
    p.add_argument("--held-out", type=int, default=32_768)
    p.add_argument("--batch-size", type=int, default=1024, help="the global batch (split over the ranks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="also train the CPU twin: its AUC must match")
    p.add_argument("--min-auc", type=float, default=0.7, help="the held-out AUC the run must beat (0.5: chance)")
    p.add_argument("--sharding", default="", type=sharding_types,
                   help=f"the sharding types the planner may pick, comma-separated ({', '.join(SHARDING_TYPES)}; "
                   "default: any it offers)")
    p.add_argument("--checkpoint", metavar="DIR", help="save a checkpoint (torch.distributed.checkpoint: the "
                   "sharded tables and optimizer) into DIR every --checkpoint-every steps, and resume from the "
                   "newest one there (a restarted job)")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--losses-json", help="also write the per-step losses and the held-out AUC to this file")
    p.add_argument("--png", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "dlrm.png"))
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(args.device, local) if args.device != "cpu" else torch.device("cpu")
    if world == 1:  # one process: a process group of one (TorchRec's sharding needs one)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        # as torchrun sets it: else TorchRec's row-wise input distribution
        # warns through the root logger, which configures logging for the
        # whole process (its later notices then print as warnings)
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    if device.type == "mtia":
        torch.mtia.set_device(device)  # (as torch.cuda.set_device: the pipeline makes its streams on it)
    backend = "gloo" if device.type == "cpu" else None  # (mtia: the openmtia backend)
    dist.init_process_group(backend=backend, rank=rank, world_size=world,
                            device_id=device if device.type == "mtia" else None,
                            timeout=datetime.timedelta(seconds=120))
    if rank == 0:
        print(f"torch {torch.__version__}; device {device}; {world} rank(s), backend {dist.get_backend()}; "
              f"DLRM, {len(TABLES)} tables, {args.samples:,} training samples, global batch {args.batch_size}")
    dmp, losses, curve, samples_s, held, (cpu_s, cores) = train(args, device, rank, world)
    final_auc = auc(*predict(dmp, held, args.batch_size, rank, world, device))
    if args.losses_json and rank == 0:
        import json

        with open(args.losses_json, "w") as f:
            json.dump({"losses": losses, "auc": final_auc}, f)
    path, same = checkpoint_roundtrip(dmp, args, device, rank, world, held)

    ok = same and final_auc > args.min_auc
    twin = None
    if args.check and device.type != "cpu":
        twin_dmp, _, _, twin_s, _, _ = train(args, torch.device("cpu"), rank, world, verbose=False)
        twin = (auc(*predict(twin_dmp, held, args.batch_size, rank, world, torch.device("cpu"))), twin_s)
        ok = ok and abs(twin[0] - final_auc) <= 1e-3
    if rank == 0:
        print(f"held-out AUC {final_auc:.4f} on {len(held[2]):,} samples (a model that learned nothing: 0.5)")
        print(f"checkpoint saved with torch.distributed.checkpoint to {path}, loaded into a fresh sharded model: "
              f"predictions {'equal' if same else 'DIFFER'}")
        print("summary:")
        print(f"  {device.type}: samples/s {samples_s:,.0f} (median step after 10 warm-up steps)  "
              f"final loss {losses[-1]:.4f}  held-out AUC {final_auc:.4f}")
        print(f"  CPU time {cpu_s * 1e3:.2f} ms a step (median), all threads of rank 0's process "
              f"({cores:.2f} of the host's {os.cpu_count()} cores busy)")
        if twin:
            print(f"  cpu twin: samples/s {twin[1]:,.0f} (in this process, after the {device.type} run: "
                  f"bench/recsys_bench.py times each device in its own)  held-out AUC {twin[0]:.4f} "
                  f"(difference {abs(twin[0] - final_auc):.1e}, tolerance 1e-3)")
        write_png(args.png, losses, curve, device, world)
        print("OK" if ok else "FAIL")
    dist.destroy_process_group()
    return 0 if ok else 1


def write_png(path, losses, curve, device, world):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print("  (matplotlib missing: no learning curve)")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    k = 20
    smooth = [sum(losses[max(0, i - k):i + 1]) / len(losses[max(0, i - k):i + 1]) for i in range(len(losses))]
    a.plot(losses, alpha=0.3, label="step")
    a.plot(smooth, label=f"mean of {k}")
    a.set_xlabel("step")
    a.set_ylabel("training loss (BCE)")
    a.legend()
    b.plot([s for s, _ in curve], [v for _, v in curve], marker="o")
    b.axhline(0.5, color="gray", linestyle="--", label="chance")
    b.set_xlabel("step")
    b.set_ylabel("AUC of the next steps' predictions")
    b.legend()
    fig.suptitle(f"DLRM on {device.type}, {world} rank(s): learning who clicks what")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"  learning curve: {path}")


if __name__ == "__main__":
    sys.exit(main())
