"""MTIAGraph replay vs eager, measured in one run: prints a table of speedups.

- 100 small ops (mul, add, tanh, relu on 64-element tensors): target replay
  at least 5x faster than eager; the same with Python-number operands,
  reported;
- a training step (forward, backward, SGD) of the small transformer of
  bench/bench.py (4 layers, width 256, sequence 128, batch 8), reported.

Eager and replay runs alternate; times are medians; mtia is synchronized
before each timer stops.
"""
import argparse
import statistics
import time

import torch


def timed(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    torch.mtia.synchronize()
    return (time.perf_counter() - t0) / inner


def compare(eager, replay, repeats, inner):
    for _ in range(2):
        eager()
        replay()
    torch.mtia.synchronize()
    e, r = [], []
    for _ in range(repeats):
        e.append(timed(eager, inner))
        r.append(timed(replay, inner))
    return statistics.median(e), statistics.median(r)


def capture(fn):
    side = torch.mtia.Stream()
    with torch.mtia.stream(side):  # warm-up, as for CUDA graphs
        for _ in range(3):
            fn()
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        fn()
    g.instantiate()
    return g


def small_ops():
    x, w, b = (torch.randn(64, device="mtia") for _ in range(3))

    def fn():
        y = x
        for _ in range(25):
            y = torch.relu(torch.tanh(y * w + b))
        return y
    g = capture(fn)
    return fn, g.replay


def small_ops_with_numbers():
    x = torch.randn(64, device="mtia")

    def fn():
        y = x
        for _ in range(50):
            y = y * 1.0001 + 0.5  # Python numbers: each op also casts its 0-dim operand
        return y
    g = capture(fn)
    return fn, g.replay


def transformer_step():
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True), num_layers=4,
        enable_nested_tensor=False).to("mtia")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(8, 128, 256, device="mtia"), torch.randn(8, 128, 256, device="mtia")

    def fn():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    g = capture(fn)
    return fn, g.replay


CASES = [
    ("100 small ops: mul, add, tanh, relu (64 elements)", small_ops, 50, 5.0),
    ("100 small ops with Python numbers (y * 1.0001 + 0.5)", small_ops_with_numbers, 50, None),
    ("transformer 4x256, seq 128, batch 8, train step", transformer_step, 1, None),
]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    print(f"| {'case':50} | {'eager':>10} | {'replay':>10} | speedup | target |")
    print(f"|{'-' * 52}|{'-' * 12}|{'-' * 12}|---------|--------|")
    for name, make, inner, target in CASES:
        eager, replay = make()
        te, tr = compare(eager, replay, args.repeats, inner)
        unit = (lambda t: f"{t * 1e6:8.1f}us") if te < 1e-3 else (lambda t: f"{t * 1e3:8.2f}ms")
        tgt = f">= {target}" if target else "report"
        print(f"| {name:50} | {unit(te):>10} | {unit(tr):>10} | {te / tr:7.2f} | {tgt:6} |")


if __name__ == "__main__":
    main()
