"""A small GPT trained and sampled on mtia: it learns to add.

The data is made here: additions written as text ("347+58=405"), operands
below 1000, split into train and held-out sums by a fixed seed; tokens are
characters. A GPT-style decoder (causal attention through
scaled_dot_product_attention) trains with AdamW, bf16 autocast and gradient
clipping. Then it answers the held-out sums greedily, is saved with
torch.save, reloaded with weights_only=True onto the device, and the reloaded
model must give the same answers. Last it deploys: the trained model is
exported (torch.export, dynamic batch and length), compiled into an
AOTInductor package on the device, loaded back, and must answer the held-out
sums as well as eager did; the summary compares their inference times
(--no-deploy skips this; examples/aoti_cpp runs such a package from C++).

    python examples/gpt.py                  # on mtia
    python examples/gpt.py --device cpu     # the reference run
    python examples/gpt.py --check          # + a short fixed-seed CPU twin: losses must match
    python examples/gpt.py --compile        # torch.compile'd model
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (also when imported from elsewhere)
from checkpoints import latest_checkpoint  # examples/checkpoints.py  # noqa: E402
from progress import Progress  # examples/progress.py  # noqa: E402

CHARS = "0123456789+=\n."  # '.' pads
STOI = {c: i for i, c in enumerate(CHARS)}
PAD = STOI["."]
SEQ = len("999+999=1998\n")


def encode(s):
    return [STOI[c] for c in s]


def decode(ids):
    return "".join(CHARS[i] for i in ids)


def make_data(seed=0, n_train=20000, n_held=500):
    """All sums a+b (a, b < 1000) shuffled by the seed: n_train to train on, n_held held out."""
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, 1000, (n_train + n_held, 2), generator=g)
    texts = [f"{a}+{b}={a + b}\n" for a, b in pairs.tolist()]
    seen, unique = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    held, train = unique[:n_held], unique[n_held:]
    return train, held


def to_batch(texts):
    x = torch.full((len(texts), SEQ), PAD, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = encode(t)
        x[i, :len(ids)] = torch.tensor(ids)
    # targets: the next character, but only after '=' (the answer) is learned
    y = torch.full_like(x, -100)
    y[:, :-1] = x[:, 1:]
    for i, t in enumerate(texts):
        eq = t.index("=")
        y[i, :eq] = -100
        y[i, len(t) - 1:] = -100
    return x, y


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=len(CHARS), width=128, layers=3, heads=4, seq=SEQ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


@torch.no_grad()
def answer(model, prompts, device):
    """Greedy decoding of '<a>+<b>=' prompts, all at once, up to the newline.
    model: a GPT, or any callable from token ids to logits (a loaded package)."""
    module = isinstance(model, nn.Module)
    if module:
        model.eval()
    ids = [encode(p) for p in prompts]
    out = ["" for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(5):
        width = max(len(i) for i in ids)
        x = torch.full((len(ids), width), PAD, dtype=torch.long)
        for r, i in enumerate(ids):
            x[r, :len(i)] = torch.tensor(i)
        x = x.to(device)
        logits = model(x).float()
        last = torch.tensor([len(i) - 1 for i in ids], device=device)
        nxt = logits[torch.arange(len(ids), device=device), last].argmax(-1).cpu().tolist()
        for r, t in enumerate(nxt):
            if not done[r]:
                if CHARS[t] == "\n":
                    done[r] = True
                else:
                    out[r] += CHARS[t]
                ids[r] = ids[r] + [t]
        if all(done):
            break
    if module:
        model.train()
    return out


def timed_answers(model, prompts, device, repeats=3):
    """(answers, median seconds of one full greedy decode, after a warm-up decode)."""
    answers = answer(model, prompts, device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        answer(model, prompts, device)  # ends with .cpu(): waits for the device
        times.append(time.perf_counter() - start)
    return answers, sorted(times)[len(times) // 2]


def deploy(model, prompts, device, directory):
    """Exports the model (batch and sequence length dynamic), packages it with
    AOTInductor for `device`, loads the package; returns (loaded package,
    package path, seconds to export and build)."""
    start = time.perf_counter()
    model.eval()
    example = torch.zeros(len(prompts), 8, dtype=torch.long, device=device)
    batch, length = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("length", min=2, max=SEQ)
    with torch.no_grad():
        ep = torch.export.export(model, (example,), dynamic_shapes={"idx": {0: batch, 1: length}})
        with warnings.catch_warnings():
            # torch 2.13's Inductor deep-copies each graph it compiles
            # (torch/_dynamo/repro/after_aot.py), and copying the exported
            # program's input spec (a pytree LeafSpec) trips torch's own
            # deprecation of LeafSpec checks (on CPU too): that one notice,
            # here only
            warnings.filterwarnings("ignore", category=FutureWarning,
                                    message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
            path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(directory, "gpt.pt2"))
    model.train()
    build_s = time.perf_counter() - start
    return torch._inductor.aoti_load_package(path), path, build_s


def checkpoint_state(model, opt, g, step, losses):
    """What a checkpoint holds, as torch.distributed.checkpoint saves and loads
    it: the model's and optimizer's state (by parameter name), the data
    order's generator, the step and the losses so far."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optim": optim_sd,
            "progress": {"step": torch.tensor(step), "data_rng": g.get_state(),
                         "losses": torch.tensor(losses, dtype=torch.float64)}}


def train(args, device, steps, verbose=True, seed=0):
    """Trains a fresh model; returns it, the per-step losses and step times, the held-out sums, memory figures."""
    torch.manual_seed(seed)
    train_texts, held = make_data(seed)
    model = GPT(width=args.width, layers=args.layers).to(device)
    rank, world = (dist.get_rank(), dist.get_world_size()) if args.ddp else (0, 1)
    # one process can train as `shares` DDP ranks would: the mean of the
    # shares' losses has the gradient DDP averages across ranks
    shares = 1 if args.ddp else getattr(args, "shares", 1)
    net = torch.nn.parallel.DistributedDataParallel(model) if args.ddp else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    fwd = torch.compile(net) if args.compile else net
    dev_type = torch.device(device).type

    def forward_backward(x, y):
        total = 0
        for xs, ys in zip(x.chunk(shares), y.chunk(shares)):
            with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=args.bf16, cache_enabled=not args.graphs):
                logits = fwd(xs)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), ys.view(-1), ignore_index=-100)
            (loss / shares).backward()
            total = total + loss.detach() / shares
        return total

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    g = torch.Generator().manual_seed(seed + 1)
    losses, step_times = [], []
    first = 0
    ckpt_dir, every = getattr(args, "checkpoint", None), getattr(args, "checkpoint_every", 0)
    resume = latest_checkpoint(ckpt_dir)
    if resume:  # a restarted job: everything as it was after that step
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = checkpoint_state(model, opt, g, 0, [0.0] * int(os.path.basename(resume)[len("step_"):]))
        dcp.load(state, checkpoint_id=resume)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        g.set_state(state["progress"]["data_rng"])
        first = int(state["progress"]["step"])
        losses = state["progress"]["losses"].tolist()
        if rank == 0:
            print(f"resumed from {resume}: step {first} of {steps}")
    bar = Progress(steps, f"train on {device}", done=first) if verbose and rank == 0 else None
    allocs_after_warmup = None
    is_mtia = dev_type == "mtia"
    graph, static = None, None
    side = torch.mtia.Stream() if args.graphs else None
    prof = None
    if getattr(args, "profile", None):  # a trace of a few steps after the warm-up, one file per rank
        os.makedirs(args.profile, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.MTIA] if dev_type == "mtia" else [])
        prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=max(0, min(5, steps - 4)), warmup=1, active=3, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(args.profile, f"rank{rank}.json")))
        prof.start()
    for step in range(first, steps):
        if step == 5 and is_mtia:
            allocs_after_warmup = torch.mtia.memory_stats().get("num_device_alloc", 0)
        t0 = time.perf_counter()
        idx = torch.randint(0, len(train_texts), (args.batch_size,), generator=g).tolist()
        x, y = to_batch([train_texts[i] for i in idx])
        x, y = x.chunk(world)[rank].to(device, non_blocking=True), y.chunk(world)[rank].to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / steps))
        if not args.graphs:
            opt.zero_grad(set_to_none=True)
            loss = forward_backward(x, y)
        elif step < 3:  # warm-up steps on a side stream, as before a CUDA graph capture
            side.wait_stream(torch.mtia.current_stream())
            with torch.mtia.stream(side):
                opt.zero_grad(set_to_none=True)
                loss = forward_backward(x, y)
            torch.mtia.current_stream().wait_stream(side)
        else:
            # Forward and backward are captured once and replayed with each new
            # batch; the gradients they write live in the graph's pool. The
            # update stays eager: stock torch lets only CUDA, XPU, HPU and
            # PrivateUse1 run a capturable AdamW.
            if graph is None:
                static = [x.clone(), y.clone()]
                opt.zero_grad(set_to_none=True)
                graph = torch.mtia.MTIAGraph()
                with torch.mtia.graph(graph):
                    static.append(forward_backward(static[0], static[1]))
            static[0].copy_(x)
            static[1].copy_(y)
            graph.replay()
            loss = static[2]
        update()
        if args.ddp:  # the whole batch's loss: the mean of the ranks' (equal) shares
            loss = loss.clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        value = loss.item()  # a sync: the step's time is its full time
        step_times.append(time.perf_counter() - t0)
        losses.append(value)
        if bar:
            tok_s = args.batch_size * SEQ / step_times[-1]
            bar.update(loss=f"{value:.4f}", tok_s=f"{tok_s:,.0f}")
        if prof:
            prof.step()
        if ckpt_dir and every and (step + 1) % every == 0 and step + 1 < steps:
            import torch.distributed.checkpoint as dcp

            dcp.save(checkpoint_state(model, opt, g, step + 1, losses),
                     checkpoint_id=os.path.join(ckpt_dir, f"step_{step + 1:06d}"))
    if bar:
        bar.close()
    if prof:
        prof.stop()
        if args.ddp:
            dist.barrier()  # every rank's trace is written before rank 0 reads them
    extra = {}
    if is_mtia:
        extra["peak"] = torch.mtia.max_memory_allocated(device)
        extra["allocs"] = torch.mtia.memory_stats().get("num_device_alloc", 0) - (allocs_after_warmup or 0)
    return model, losses, step_times, held, extra


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="mtia")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in float32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--graphs", action="store_true", help="capture the train step in an MTIAGraph and replay it")
    p.add_argument("--check", action="store_true", help="also run a short fixed-seed CPU twin (float32): "
                   "fail if the mtia losses differ")
    p.add_argument("--no-deploy", dest="deploy", action="store_false",
                   help="skip the AOTInductor deployment of the trained model")
    p.add_argument("--losses-json", help="also write the per-step losses to this file")
    p.add_argument("--profile", metavar="DIR", help="trace a few steps with torch.profiler into DIR (a file per "
                   "rank) and print Holistic Trace Analysis's summary of them, with plots")
    p.add_argument("--checkpoint", metavar="DIR", help="save a checkpoint (torch.distributed.checkpoint) into DIR "
                   "every --checkpoint-every steps, and resume from the newest one there (a restarted job)")
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--png", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "loss.png"))
    args = p.parse_args()
    args.ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if args.ddp:  # under torchrun: one mtia device per rank, DDP over the openmtia backend
        local = int(os.environ["LOCAL_RANK"])
        device = torch.device(args.device, local) if args.device != "cpu" else torch.device("cpu")
        dist.init_process_group(device_id=device if device.type == "mtia" else None)
        if dist.get_rank() == 0:
            print(f"DDP: {dist.get_world_size()} ranks, backend {dist.get_backend()}; each takes "
                  f"1/{dist.get_world_size()} of every batch")
    else:
        device = torch.device(args.device)
    if args.graphs and (device.type != "mtia" or args.compile or args.ddp):
        p.error("--graphs captures an eager step on mtia in one process")

    if not args.ddp or dist.get_rank() == 0:
        mode = ", compiled" if args.compile else ", MTIAGraph replays" if args.graphs else ""
        print(f"torch {torch.__version__}; device {device}; GPT {args.layers} layers, width {args.width}, "
              f"bf16 autocast {'on' if args.bf16 else 'off'}{mode}")
    model, losses, times, held, extra = train(args, device, args.steps)
    if args.losses_json and (not args.ddp or dist.get_rank() == 0):
        with open(args.losses_json, "w") as f:
            json.dump(losses, f)
    if args.ddp:
        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return 0
        args.ddp = False
    if args.profile:
        from trace_summary import summarize  # (examples/trace_summary.py)
        summarize(args.profile, plots_dir=args.profile)
    warm = times[5:] or times
    step_ms = 1e3 * sorted(warm)[len(warm) // 2]
    tok_s = args.batch_size * SEQ / (step_ms / 1e3)

    prompts = [t[:t.index("=") + 1] for t in held]
    truth = [t[t.index("=") + 1:-1] for t in held]
    answers, eager_s = timed_answers(model, prompts, device)
    acc = sum(a == t for a, t in zip(answers, truth)) / len(truth)
    print(f"held-out sums answered correctly: {acc:.1%} of {len(truth)} (e.g. "
          + ", ".join(f"{p}{a}" for p, a in list(zip(prompts, answers))[:3]) + ")")

    path = os.path.join(tempfile.mkdtemp(), "gpt.pt")
    torch.save(model.state_dict(), path)
    reloaded = GPT(width=args.width, layers=args.layers).to(device)
    reloaded.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    same = answer(reloaded, prompts, device) == answers
    print(f"saved to {path}, reloaded with weights_only=True onto {device}: answers {'equal' if same else 'DIFFER'}")

    deployed_ok = True
    if args.deploy:
        package, package_path, build_s = deploy(model, prompts, device, os.path.dirname(path))
        aoti_answers, aoti_s = timed_answers(package, prompts, device)
        aoti_acc = sum(a == t for a, t in zip(aoti_answers, truth)) / len(truth)
        agree = sum(a == b for a, b in zip(aoti_answers, answers))
        # the same accuracy as eager (one differing answer of the held-out set
        # at most: a float32 argmax may tie differently)
        deployed_ok = abs(aoti_acc - acc) <= 1 / len(truth) + 1e-9
        print(f"deployed with AOTInductor on {device} ({package_path}, exported and built in {build_s:.0f} s): "
              f"held-out sums answered correctly {aoti_acc:.1%}, {agree} of {len(truth)} answers as eager's"
              + ("" if deployed_ok else " (ACCURACY DIFFERS)"))

    print("summary:")
    print(f"  tokens/s {tok_s:,.0f}  step time {step_ms:.1f} ms (median after 5 warm-up steps)  "
          f"final loss {losses[-1]:.4f}")
    if args.deploy:
        print(f"  inference (greedy answers to {len(prompts)} held-out sums): eager {1e3 * eager_s:.1f} ms, "
              f"AOTInductor {1e3 * aoti_s:.1f} ms ({eager_s / aoti_s:.2f}x)")
    if "peak" in extra:
        print(f"  peak device memory {extra['peak'] / 2**20:.1f} MiB  device allocations after warm-up "
              f"{extra['allocs']}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        os.makedirs(os.path.dirname(args.png) or ".", exist_ok=True)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(losses)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.set_title(f"GPT on {device}: learning to add")
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"  loss curve: {args.png}")
    except ImportError:
        print("  (matplotlib missing: no loss curve)")

    ok = same and deployed_ok
    if args.check:
        twin = argparse.Namespace(**{**vars(args), "bf16": False, "compile": False, "graphs": False, "ddp": False,
                                     "profile": None})
        _, mine, _, _, _ = train(twin, device, 20, verbose=False, seed=1)
        _, ref, _, _, _ = train(twin, torch.device("cpu"), 20, verbose=False, seed=1)
        worst = max(abs(a - b) for a, b in zip(mine, ref))
        print(f"check: 20 float32 steps on {device} vs cpu, largest loss difference {worst:.2e} (tolerance 1e-4)")
        ok = ok and worst <= 1e-4
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
