"""Inference latency: eager vs torch.compile vs AOTInductor, on mtia and on CPU,
measured in one process; prints a table (issue 41).

For each model and mode, the CPU and mtia variants run alternately (medians of
the repeats; mtia is synchronized before each timer stops), each turn after
50 ms idle: without it, the OpenMP threads of the previous turn's kernels
still spin and take a core from the next turn (both devices read 1.3-1.7x
slower; a deployment runs one of them). The ratio is mtia's
time over CPU's in the same mode (below 1: mtia is faster). Target: AOTInductor
on mtia within 1.1x of AOTInductor on CPU.

Models: a transformer block (torch.nn.TransformerEncoderLayer(256, 4, 1024),
batch 8 x 64 tokens) and the main job's GPT (examples/gpt.py: 3 layers, width
128; 64 prompts of 13 tokens), both in float32, under torch.no_grad().

    python bench/deploy_bench.py            # both models
    python bench/deploy_bench.py --quick    # the block only, few repeats (a smoke run)
"""
import argparse
import os
import statistics
import sys
import tempfile

import torch
import torch._dynamo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from bench import alternating, on  # noqa: E402
from gpt import GPT, SEQ  # noqa: E402


def block_model():
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    return layer, torch.randn(8, 64, 256)


def gpt_model():
    return GPT(width=128, layers=3), torch.randint(0, 14, (64, SEQ))


MODELS = {"transformer block": block_model, "main job's GPT": gpt_model}
SETTLE = 0.05  # seconds idle before each turn (bench.alternating)


def variant(model_fn, device, mode, directory):
    """A no-argument function running one inference of the model on device."""
    torch.manual_seed(0)
    model, x = model_fn()
    model = model.to(device).eval()
    x = x.to(device)
    if mode == "eager":
        fn = model
    elif mode == "compile":
        fn = torch.compile(model)
    else:
        ep = torch.export.export(model, (x,))
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=os.path.join(directory, f"{abs(hash((model_fn, device)))}.pt2"))
        fn = torch._inductor.aoti_load_package(path)

    def run():
        with torch.no_grad():
            fn(x)
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the block only, 3 repeats")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    models = {"transformer block": block_model} if args.quick else MODELS
    repeats = 3 if args.quick else args.repeats
    inner = 1 if args.quick else 5
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name, model_fn in models.items():
            for mode in ("eager", "compile", "aoti"):
                torch._dynamo.reset()
                fns = {dev: (variant(model_fn, dev, mode, directory), on(dev)) for dev in ("cpu", "mtia")}
                times = alternating(fns, repeats, inner, settle=SETTLE)
                cpu, mtia = (1e3 * statistics.median(times[d]) for d in ("cpu", "mtia"))
                rows.append((name, mode, cpu, mtia, mtia / cpu))
    print(f"{'model':<20} {'mode':<8} {'CPU ms':>9} {'mtia ms':>9} {'mtia/CPU':>9}")
    for name, mode, cpu, mtia, ratio in rows:
        print(f"{name:<20} {mode:<8} {cpu:>9.3f} {mtia:>9.3f} {ratio:>8.2f}x")
    worst = max(r[4] for r in rows if r[1] == "aoti")
    print(f"target: AOTInductor on mtia within 1.1x of AOTInductor on CPU: worst {worst:.2f}x "
          f"({'met' if worst <= 1.1 else 'NOT met'})")


if __name__ == "__main__":
    main()
