"""torch._foreach_* on mtia (what optimizers call with foreach=True, mtia's
default): one task per call over the whole list, running CPU's kernel, so
the results are CPU's bit for bit; a list spanning devices takes the
per-tensor path, as on CUDA. Every foreach op of torch's OpInfo database,
first call and later calls."""
import pytest
import torch
from torch.testing._internal.common_methods_invocations import (
    foreach_binary_op_db, foreach_other_op_db, foreach_pointwise_op_db, foreach_reduce_op_db, foreach_unary_op_db)
from torch.utils._pytree import tree_map

import openmtia

OPS = foreach_unary_op_db + foreach_binary_op_db + foreach_pointwise_op_db + foreach_reduce_op_db + foreach_other_op_db
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]


def to_mtia(x):
    return tree_map(lambda t: t.to("mtia") if isinstance(t, torch.Tensor) else t, x)


def assert_equal_to_cpu(mtia_result, cpu_result):
    flat_m, flat_c = [], []
    tree_map(lambda t: flat_m.append(t) if isinstance(t, torch.Tensor) else None, mtia_result)
    tree_map(lambda t: flat_c.append(t) if isinstance(t, torch.Tensor) else None, cpu_result)
    assert len(flat_m) == len(flat_c)
    for m, c in zip(flat_m, flat_c):
        assert m.device.type == "mtia"
        torch.testing.assert_close(m.cpu(), c, rtol=0, atol=0, equal_nan=True)


def cases():
    for op in OPS:
        for dtype in DTYPES:
            if dtype in op.supported_dtypes("cpu"):
                yield pytest.param(op, dtype, id=f"{op.name}-{str(dtype)[6:]}")


@pytest.mark.parametrize("op,dtype", list(cases()))
def test_a_foreach_op_equals_cpu_in_one_launch_a_call(op, dtype):
    samples = list(op.sample_inputs("cpu", dtype, num_input_tensors=[5]))
    assert samples
    for sample in samples:
        variants = [("functional", op.method_variant)]
        if op.inplace_variant is not None:
            variants.append(("inplace", op.inplace_variant))
        for kind, fn in variants:
            for call in ("first", "later"):
                cpu_in = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, sample.input)
                try:
                    expected = fn(cpu_in, *sample.args, **sample.kwargs)
                except Exception as e:  # CPU refuses it: mtia must raise the same type
                    with pytest.raises(type(e)):
                        fn(to_mtia(sample.input), *to_mtia(sample.args), **to_mtia(sample.kwargs))
                        torch.mtia.synchronize()
                    break
                m_in = to_mtia(sample.input)
                args, kwargs = to_mtia(sample.args), to_mtia(sample.kwargs)
                torch.mtia.synchronize()
                before = openmtia._C._host_launches()
                got = fn(m_in, *args, **kwargs)
                launches = openmtia._C._host_launches() - before
                if kind == "inplace":
                    assert_equal_to_cpu(m_in, cpu_in)
                else:
                    assert_equal_to_cpu(got, expected)
                if call == "later":
                    assert launches == 1, f"{op.name} ({kind}): {launches} launches"


def test_lists_mixing_shapes_and_dtypes_equal_cpu():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(3, 4, generator=g), torch.randn(7, generator=g, dtype=torch.float64),
          torch.randn(2, 2, 2, generator=g).to(torch.bfloat16), torch.randn((), generator=g)]
    ys = [torch.randn(x.shape, generator=g).to(x.dtype) for x in xs]
    for _ in range(2):
        expected = torch._foreach_addcmul([x.clone() for x in xs], ys, ys, value=0.5)
        got = torch._foreach_addcmul(to_mtia(xs), to_mtia(ys), to_mtia(ys), value=0.5)
        assert_equal_to_cpu(got, expected)


def test_a_list_spanning_two_devices_runs_per_tensor_as_on_cuda():
    a = [torch.randn(5), torch.randn(6)]
    b = [torch.randn(5), torch.randn(6)]
    ma = [a[0].to("mtia:0"), a[1].to("mtia:1")]
    mb = [b[0].to("mtia:0"), b[1].to("mtia:1")]
    got = torch._foreach_add(ma, mb, alpha=2)
    assert [t.device for t in got] == [torch.device("mtia:0"), torch.device("mtia:1")]
    for g_, x, y in zip(got, a, b):
        assert torch.equal(g_.cpu(), x + 2 * y)
    # a pair on two devices: CUDA's error, at the call
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add(ma, [b[0].to("mtia:1"), mb[1]])
    assert torch.equal(torch._foreach_mul(ma, 3)[1].cpu(), a[1] * 3)  # the devices stay usable


def test_adamw_foreach_steps_equal_cpu_in_a_few_launches():
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 64), (64,), (256, 64), (64, 256), (1000,)] * 5
    params = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(4)]
    cpu_p = [torch.nn.Parameter(p.clone()) for p in params]
    m_p = [torch.nn.Parameter(p.to("mtia")) for p in params]
    cpu_opt = torch.optim.AdamW(cpu_p, lr=1e-2, weight_decay=0.1)
    m_opt = torch.optim.AdamW(m_p, lr=1e-2, weight_decay=0.1)  # foreach: mtia's default
    for step, gs in enumerate(grads):
        for p, q, gr in zip(cpu_p, m_p, gs):
            p.grad = gr.clone()
            q.grad = gr.to("mtia")
        cpu_opt.step()
        torch.mtia.synchronize()
        before = openmtia._C._host_launches()
        m_opt.step()
        launches = openmtia._C._host_launches() - before
        if step > 0:
            assert launches <= 10, launches  # (25 parameters: a launch per tensor made 200)
    for p, q in zip(cpu_p, m_p):
        assert torch.equal(q.detach().cpu(), p.detach())


def test_a_zero_dim_tensor_on_another_device_goes_per_tensor_like_the_composite_kernel():
    # only a 0-dim CPU tensor (a wrapped scalar) may go with a list of any
    # device; a 0-dim tensor of another mtia device takes the per-tensor path
    # (the composite kernel's), as a list spanning devices does
    x = [torch.randn(3), torch.randn(2)]
    on1 = [t.to("mtia:1") for t in x]
    for other in (torch.tensor(2.0), torch.tensor(2.0, device="mtia:0")):
        got = torch._foreach_add(on1, other)
        assert [t.device for t in got] == [torch.device("mtia:1")] * 2
        for g_, t in zip(got, x):
            assert torch.equal(g_.cpu(), t + 2.0)
