"""torch.compile on mtia vs on CPU, measured in one process: prints a table.

For each model, four variants run alternately (CPU eager, CPU compiled, mtia
eager, mtia compiled), medians of the repeats; mtia is synchronized before each
timer stops. Speedup = eager time / compiled time, per device. Targets (issue 10):

- mtia's compile speedup at least CPU Inductor's, on every row;
- mode="reduce-overhead" on a small-op-bound model (8 Linear(32, 32), batch 4):
  at least 5x eager mtia;
- compile time of the transformer on mtia within 1.2x of CPU's (caches off).
"""
import argparse
import statistics
import time

import torch
import torch._dynamo
from torch._inductor import config

from bench import alternating, on


def mlp_model():
    return torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(512, 512), torch.nn.ReLU())])


def transformer_model():
    return torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True), num_layers=2,
        enable_nested_tensor=False)


def train_step(model_fn, shape):
    def make(device, compiled):
        torch.manual_seed(0)
        model = model_fn().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(*shape, device=device), torch.randn(*shape, device=device)
        fwd = torch.compile(model) if compiled else model
        update = torch.compile(opt.step) if compiled else opt.step

        def step():
            loss = torch.nn.functional.mse_loss(fwd(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            update()
        return step
    return make


def forward_eval(model_fn, shape):
    def make(device, compiled):
        torch.manual_seed(0)
        model = model_fn().to(device).eval()
        x = torch.randn(*shape, device=device)
        fwd = torch.compile(model) if compiled else model

        def step():
            with torch.no_grad():
                fwd(x)
        return step
    return make


ROWS = [
    # name, factory, inner iterations
    ("MLP 4x512 train step, AdamW, batch 256", train_step(mlp_model, (256, 512)), 3),
    ("transformer 2x256 forward, eval, batch 8, seq 128", forward_eval(transformer_model, (8, 128, 256)), 3),
    ("transformer 2x256 train step, AdamW", train_step(transformer_model, (8, 128, 256)), 1),
]


def measure(variants, repeats, inner):
    """Median time of each variant, the variants run alternately (after 3
    warm-up calls: compiles, plans, recordings)."""
    return {k: statistics.median(v) for k, v in alternating(variants, repeats, inner, warmup=3).items()}


def fmt(t):
    return f"{t * 1e6:.1f}us" if t < 1e-3 else f"{t * 1e3:.2f}ms"


def speedup_rows(repeats, quick):
    print("| model | cpu eager | cpu compiled | cpu speedup | mtia eager | mtia compiled | mtia speedup | met |")
    print("|---|---|---|---|---|---|---|---|")
    for name, make, inner in ROWS:
        torch._dynamo.reset()
        variants = {(d, c): (make(d, c), on(d)) for d in ("cpu", "mtia") for c in (False, True)}
        t = measure(variants, repeats, max(1, inner // 2) if quick else inner)
        s_cpu = t[("cpu", False)] / t[("cpu", True)]
        s_mtia = t[("mtia", False)] / t[("mtia", True)]
        print(f"| {name} | {fmt(t[('cpu', False)])} | {fmt(t[('cpu', True)])} | {s_cpu:.2f}x | "
              f"{fmt(t[('mtia', False)])} | {fmt(t[('mtia', True)])} | {s_mtia:.2f}x | "
              f"{'yes' if s_mtia >= s_cpu else 'NO'} |")


def small_op_model(device, mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())])
    model = model.to(device).eval()
    x = torch.randn(4, 32, device=device)
    fwd = model if mode == "eager" else torch.compile(model, mode=mode)

    def step():
        with torch.no_grad():
            fwd(x)
    return step


def reduce_overhead_row(repeats):
    from openmtia.inductor import graphs

    torch._dynamo.reset()
    graphs.reset_stats()
    modes = ("eager", "default", "reduce-overhead")
    t = measure({m: (small_op_model("mtia", m), on("mtia")) for m in modes}, repeats, 300)
    ratio = t["eager"] / t["reduce-overhead"]
    # the row measures graph replays, not a silent eager fallback
    if graphs.stats["recordings"] != 1 or graphs.stats["capture_failures"] or graphs.stats["replays"] < 300:
        raise SystemExit(f"reduce-overhead did not replay one recorded graph: {dict(graphs.stats)}")
    print("\n| 8 Linear(32,32), batch 4, mtia | eager | compiled (default) | reduce-overhead | vs eager | target | met |")
    print("|---|---|---|---|---|---|---|")
    print(f"| forward, eval | {fmt(t['eager'])} | {fmt(t['default'])} | {fmt(t['reduce-overhead'])} | "
          f"{ratio:.1f}x | >= 5x | {'yes' if ratio >= 5 else 'NO'} |")


def compile_time_row(samples=3):
    """Compile time of a first train step, several samples per device, the
    devices alternating and each sample's order flipped (a warm process
    favours whoever compiles second): medians, and the median of the per-pair
    ratios."""
    times = {"cpu": [], "mtia": []}
    with config.patch(force_disable_caches=True):
        for i in range(samples):
            for device in ("cpu", "mtia") if i % 2 == 0 else ("mtia", "cpu"):
                torch._dynamo.reset()
                step = train_step(transformer_model, (8, 128, 256))(device, True)
                t0 = time.perf_counter()
                step()
                on(device)()
                times[device].append(time.perf_counter() - t0)
    ratio = statistics.median(m / c for c, m in zip(times["cpu"], times["mtia"]))
    cpu, mtia = statistics.median(times["cpu"]), statistics.median(times["mtia"])
    print(f"\n| compile time (first train step, caches off, median of {samples}) | cpu | mtia | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    print(f"| transformer 2x256, forward + backward + AdamW | {cpu:.1f}s | {mtia:.1f}s | "
          f"{ratio:.2f} | <= 1.2 | {'yes' if ratio <= 1.2 else 'NO'} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="fewer repeats, no compile-time row (smoke run)")
    args = p.parse_args()
    repeats = 2 if args.quick else args.repeats
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, median of {repeats} runs\n")
    speedup_rows(repeats, args.quick)
    reduce_overhead_row(repeats)
    if not args.quick:
        compile_time_row()


if __name__ == "__main__":
    main()
