"""bf16/fp16 against float32 on mtia, op by op: the time of each op of a broad
list on a 1024x1024 tensor (16x64x32x32 for the pooling and norm ops) in
bf16 and fp16 over its time in float32, all on mtia (issue 18's point 1: at
most 1.1 on every host). Rows above the target are marked; bench/bench.py's
low-precision table keeps the main cases, this the long tail.

    python bench/op_survey.py                 # every op
    python bench/op_survey.py gelu,erfc,flip  # some
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/op_survey.py  # as a host without AVX-512

Each time is the median of 7 runs of 10 calls and a synchronize, the three
dtypes' runs interleaved. A single run reads up to ~4 ms high now and then
when a synchronize waits for a scheduler tick (docs/benchmarks.md: the synchronize
poll), and a process sometimes runs an op several times slower for a
while: rerun a marked row before believing it.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

TARGET = 1.1
A = torch.ops.aten


def timed(fns, inner=10, repeats=7):
    """The median time of each of `fns` (by key) over `repeats` runs of
    `inner` calls and a synchronize, the keys interleaved within each run:
    a stretch of a slow process (docs/benchmarks.md: the synchronize poll; issue notes:
    two-speed processes) then slows every dtype alike instead of one."""
    for fn in fns.values():
        for _ in range(2):
            fn()
    torch.mtia.synchronize()
    runs = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            torch.mtia.synchronize()
            runs[k].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in runs.items()}


def image(x):
    return x.view(16, 64, 32, 32)


OPS = {
    # unary
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": lambda x: torch.log(x.abs() + 0.1),
    "log10": lambda x: torch.log10(x.abs() + 0.1), "log1p": lambda x: torch.log1p(x.abs()), "sqrt": lambda x: x.abs().sqrt(),
    "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(), "sin": torch.sin, "tan": torch.tan, "tanh": torch.tanh, "sinh": torch.sinh,
    "cosh": torch.cosh, "atanh": lambda x: torch.atanh(x * 0.5), "erf": torch.erf, "erfc": torch.erfc,
    "erfinv": lambda x: torch.erfinv(x * 0.5), "sinc": torch.sinc, "reciprocal": torch.reciprocal, "abs": torch.abs,
    "neg": torch.neg, "sign": torch.sign, "floor": torch.floor, "round": torch.round, "frac": torch.frac,
    "isnan": torch.isnan, "nan_to_num": torch.nan_to_num,
    # activations and their backward
    "relu": F.relu, "gelu": F.gelu, "gelu tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "sigmoid": torch.sigmoid, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "leaky_relu": F.leaky_relu,
    "relu6": F.relu6, "elu": F.elu, "selu": F.selu, "softplus": F.softplus, "mish": F.mish, "logsigmoid": F.logsigmoid,
    "softshrink": F.softshrink, "hardshrink": F.hardshrink, "glu": F.glu,
    "gelu_backward": lambda x: A.gelu_backward(x, x), "silu_backward": lambda x: A.silu_backward(x, x),
    "threshold_backward": lambda x: A.threshold_backward(x, x, 0.0),
    "hardswish_backward": lambda x: A.hardswish_backward(x, x),
    "elu_backward": lambda x: A.elu_backward(x, 1.0, 1, 1, False, x),
    "softplus_backward": lambda x: A.softplus_backward(x, x, 1, 20),
    # binary, ternary
    "add": lambda x: x + x, "mul number": lambda x: x * 1.5, "div number": lambda x: x / 3.0,
    "x + row": lambda x: x + x[0], "x * column": lambda x: x * x[:, :1], "maximum": lambda x: torch.maximum(x, x),
    "atan2": lambda x: torch.atan2(x, x), "hypot": lambda x: torch.hypot(x, x), "xlogy": lambda x: torch.xlogy(x, x.abs()),
    "fmod": lambda x: x.fmod(0.7), "pow tensor": lambda x: x.abs().pow(x), "clamp numbers": lambda x: x.clamp(-0.5, 0.5),
    "clamp tensors": lambda x: x.clamp(x, x), "where": lambda x: torch.where(x > 0, x, 0.0),
    "masked_fill": lambda x: x.masked_fill(x > 0, 0.0), "lerp number": lambda x: torch.lerp(x, x, 0.3),
    "lerp tensor": lambda x: torch.lerp(x, x, x), "addcmul": lambda x: torch.addcmul(x, x, x, value=0.5),
    "x > y": lambda x: x > x,
    # reductions and scans
    "sum": torch.sum, "sum(0)": lambda x: x.sum(0), "mean(-1)": lambda x: x.mean(-1), "amax(-1)": lambda x: x.amax(-1),
    "prod(1)": lambda x: x.prod(1), "nansum": torch.nansum, "std()": lambda x: x.std(), "var(1)": lambda x: x.var(1),
    "norm(dim=1)": lambda x: x.norm(dim=1), "logsumexp(1)": lambda x: x.logsumexp(1), "argmax(1)": lambda x: x.argmax(1),
    "isnan().any()": lambda x: x.isnan().any(), "cumsum(1)": lambda x: x.cumsum(1), "cummax(1)": lambda x: x.cummax(1),
    "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: x.log_softmax(-1), "sort": lambda x: x.sort(-1),
    "topk": lambda x: x.topk(8, -1),
    # moves and indexing
    "flip(1)": lambda x: x.flip(1), "roll": lambda x: x.roll(3, 1), "t().contiguous()": lambda x: x.t().contiguous(),
    "cat": lambda x: torch.cat([x, x], 1), "gather": None, "scatter_": None, "scatter_add_": None, "index_select(0)": None,
    "index_add_": None, "embedding_backward": None,
    # losses, norms, pooling
    "mse_loss": lambda x: F.mse_loss(x, x * 0.5), "smooth_l1_loss": lambda x: F.smooth_l1_loss(x, x * 0.5),
    "cross_entropy": None, "layer_norm": lambda x: F.layer_norm(x, (1024,)), "rms_norm": lambda x: F.rms_norm(x, (1024,)),
    "group_norm": lambda x: F.group_norm(image(x), 8), "batch_norm": lambda x: F.batch_norm(image(x), None, None, training=True),
    "max_pool2d": lambda x: F.max_pool2d(image(x), 2), "avg_pool2d": lambda x: F.avg_pool2d(image(x), 2),
    "interpolate": lambda x: F.interpolate(image(x), scale_factor=2, mode="bilinear"),
    "sdpa": lambda x: F.scaled_dot_product_attention(*(x.view(4, 4, 256, 256),) * 3),
    "linear": lambda x: F.linear(x, x), "conv1d": None,
}


def indexed(name):
    """The ops that need an index (made once, on mtia)."""
    idx = torch.randint(0, 1024, (1024,), device="mtia")
    rows = idx.view(1, -1).expand(1024, 1024).contiguous()
    return {
        "gather": lambda x: torch.gather(x, 1, rows),
        "scatter_": lambda x: torch.zeros_like(x).scatter_(1, rows, x),
        "scatter_add_": lambda x: torch.zeros_like(x).scatter_add_(1, rows, x),
        "index_select(0)": lambda x: x.index_select(0, idx),
        "index_add_": lambda x: torch.zeros_like(x).index_add_(0, idx, x),
        "embedding_backward": lambda x: A.embedding_dense_backward(x, idx, 1024, -1, False),
        "cross_entropy": lambda x: F.cross_entropy(x, idx),
        "conv1d": lambda x: F.conv1d(x.view(16, 64, 1024), torch.ones(64, 64, 3, device="mtia", dtype=x.dtype)),
    }[name]


def main():
    import openmtia  # noqa: F401 (the device)
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(OPS)
    print(f"bf16/fp16 time over float32's on mtia, 1024x1024 (target <= {TARGET}); "
          f"ATen capability {torch.backends.cpu.get_cpu_capability()}\n")
    print(f"| {'op':22} | {'float32':>9} | {'bf16':>5} | {'fp16':>5} | met |")
    print(f"|{'-' * 24}|{'-' * 11}|{'-' * 7}|{'-' * 7}|-----|")
    missed = []
    for name in names:
        fn = OPS[name] or indexed(name)
        g = torch.Generator().manual_seed(0)
        base = torch.randn(1024, 1024, generator=g).to("mtia")
        xs = {dtype: base.to(dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16)}
        t = timed({dtype: (lambda x=x: fn(x)) for dtype, x in xs.items()})
        bf16, fp16 = t[torch.bfloat16] / t[torch.float32], t[torch.float16] / t[torch.float32]
        ok = max(bf16, fp16) <= TARGET
        if not ok:
            missed.append(name)
        print(f"| {name:22} | {t[torch.float32] * 1e3:7.3f}ms | {bf16:5.2f} | {fp16:5.2f} | {'yes' if ok else 'NO':3} |",
              flush=True)
    print(f"\n{len(names) - len(missed)} of {len(names)} met; above the target: {', '.join(missed) or 'none'}")


if __name__ == "__main__":
    main()
