"""Graph replays of elementwise ops equal CPU on each replay's new inputs.

A captured structured TensorIterator op (most pointwise ops) replays with its
iterator built at capture time (csrc/aten/prebuilt.cpp). These tests run PyTorch's
own OpInfo samples of the elementwise ops, functional and in-place: capture
once, then replay with new input values (a permutation of the sample's) and
compare with CPU exactly. A kernel that kept a snapshot of an input (e.g. a
dtype-converted copy made at capture) fails here.
"""
import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo
from torch.utils._pytree import tree_flatten, tree_map

import openmtia

RANDOM = {"nn.functional.rrelu"}  # its values differ from CPU's by design (tests/test_random.py)
OTHER_POINTWISE = {"clamp", "lerp", "addcmul", "addcdiv", "sigmoid", "nn.functional.relu", "nn.functional.silu",
                   "nn.functional.gelu", "nn.functional.hardtanh", "nn.functional.threshold", "nn.functional.prelu"}
OPS = [op for op in op_db if (isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) or op.name in OTHER_POINTWISE)
       and op.name not in RANDOM]
DTYPES = (torch.float32, torch.int64, torch.bool)
SAMPLES_PER_OP = 4


def to_mtia(tree):
    return tree_map(lambda x: x.to("mtia") if isinstance(x, torch.Tensor) else x, tree)


def permuted(tree, gen):
    def perm(x):
        if not isinstance(x, torch.Tensor) or x.numel() <= 1:
            return x
        flat = x.reshape(-1)
        return flat[torch.randperm(flat.numel(), generator=gen)].reshape(x.shape)
    return tree_map(perm, tree)


def set_values(static, values):
    for d, v in zip(tree_flatten(static)[0], tree_flatten(values)[0]):
        if isinstance(d, torch.Tensor):
            d.copy_(v)


def exactly_equal(actual, expected):
    actual = tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, actual)
    torch.testing.assert_close(actual, expected, equal_nan=True, atol=0, rtol=0)


def run_case(fn, args, kwargs, inplace, gen):
    """Captures fn on mtia copies of (args, kwargs), replays it twice on
    permuted values; returns (prebuilt kernels made, mismatch or None)."""
    cpu = (args, kwargs)
    static = to_mtia(cpu)
    side = torch.mtia.Stream()
    with torch.mtia.stream(side):  # warm-up, as for CUDA graphs
        fn(*static[0], **static[1])
    torch.mtia.synchronize()
    set_values(static, cpu)
    before = openmtia._C._prebuilt_kernel_count()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        out = fn(*static[0], **static[1])
    g.instantiate()
    made = openmtia._C._prebuilt_kernel_count() - before
    try:
        for _ in range(2):
            values = permuted(cpu, gen)
            set_values(static, values)
            g.replay()
            expected = fn(*values[0], **values[1])
            exactly_equal(static[0][0] if inplace else out, values[0][0] if inplace else expected)
    except AssertionError as e:
        return made, str(e)
    finally:
        g.reset()
    return made, None


def samples(op, dtype):
    for s in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_OP]:
        args, kwargs = (s.input, *s.args), dict(s.kwargs)
        if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in tree_flatten((args, kwargs))[0]):
            continue
        yield args, kwargs


@pytest.mark.parametrize("inplace", [False, True], ids=["functional", "inplace"])
def test_replays_of_elementwise_op_samples_equal_cpu_on_new_inputs(inplace):
    gen = torch.Generator().manual_seed(0)
    cases = prebuilt = 0
    mismatches = []
    for op in OPS:
        fn = op.inplace_variant if inplace else op.op
        if fn is None:
            continue
        for dtype in DTYPES:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            for args, kwargs in samples(op, dtype):
                try:
                    c = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, (args, kwargs))
                    fn(*c[0], **c[1])  # invalid samples (e.g. an in-place op that would change dtype) are skipped
                except Exception:
                    continue
                made, mismatch = run_case(fn, args, kwargs, inplace, gen)
                cases += 1
                prebuilt += made > 0
                if mismatch:
                    mismatches.append(f"{op.name} {dtype} prebuilt={made}: {mismatch[:300]}")
    assert not mismatches, "\n".join(mismatches)
    # the fast path is taken: most of these samples replay a prebuilt kernel
    print(f"{cases} samples, {prebuilt} replayed prebuilt kernels")
    if torch.mtia.get_device_properties(0)["host_addressable"]:
        assert cases > 400 and prebuilt > 0.4 * cases, (cases, prebuilt)
    else:  # (prebuilding reads device memory on the host: off, OPENMTIA_STRICT_MEMORY=1)
        assert cases > 400 and prebuilt == 0, (cases, prebuilt)


def test_replays_read_inputs_that_the_iterator_would_convert():
    """Mixed dtypes: a CPU TensorIterator converts such an input when it is
    built. Captured, the op must still read each replay's values."""
    x = torch.arange(6, device="mtia")                       # int64, promoted to float
    y = torch.full((6,), 0.5, device="mtia")
    s = torch.tensor(2.0, dtype=torch.float64, device="mtia")  # a 0-dim device tensor of another dtype
    b = torch.tensor([True, False, True], device="mtia")     # bool ** 2 is int64 (pow converts in its meta)
    fns = [lambda: x + y, lambda: y * s, lambda: torch.square(b), lambda: y.add_(s)]
    side = torch.mtia.Stream()
    with torch.mtia.stream(side):
        for f in fns[:3]:
            f()
    torch.mtia.synchronize()
    y.fill_(0.5)
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        outs = [f() for f in fns]
    g.instantiate()
    for k in range(1, 4):
        x.copy_(torch.arange(6) * k)
        y.fill_(0.25 * k)
        s.fill_(float(k))
        b.copy_(torch.tensor([k % 2 == 0, True, False]))
        g.replay()
        assert torch.equal(outs[0].cpu(), torch.arange(6) * k + 0.25 * k)
        assert torch.equal(outs[1].cpu(), torch.full((6,), 0.25 * k * k))
        assert torch.equal(outs[2].cpu(), torch.tensor([int(k % 2 == 0), 1, 0]))
        assert torch.equal(y.cpu(), torch.full((6,), 0.25 * k + k))  # the add_ ran last


def test_python_numbers_are_baked_into_the_graph_like_cuda():
    x = torch.ones(8, device="mtia")
    c = torch.tensor(3.0)  # a CPU scalar tensor: read when captured, as CUDA graphs do
    (x * 1.5 + c).sum()
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        y = x * 1.5 + c
    g.instantiate()
    c.fill_(100.0)
    x.fill_(2.0)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((8,), 6.0))
