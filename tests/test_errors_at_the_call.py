"""Errors that depend on types and shapes alone are raised at the call, as
CPU raises them, never deferred to the next synchronization (issue 55,
point 3). Over PyTorch's OpInfo database: every op's error_inputs, and every
op in each dtype its CPU kernel lacks (a sample's first call and a second
call of the same signature, which runs as a stream task). A deferred error
would also fail whatever ran next."""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64, torch.complex128, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]


def to_mtia(x):
    if isinstance(x, torch.Tensor):
        return x.to("mtia")
    if isinstance(x, (list, tuple)):
        return type(x)(to_mtia(i) for i in x)
    if isinstance(x, dict):
        return {k: to_mtia(v) for k, v in x.items()}
    return x


def raised_at_call(fn):
    """(what the call raised or None, what the next synchronize raised or None)."""
    call = sync = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (compared with CPU's by the caller)
        call = e
    try:
        torch.mtia.synchronize()
    except Exception as e:  # noqa: BLE001
        sync = e
    return call, sync


def test_opinfo_error_inputs_raise_at_the_call():
    deferred, checked = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if op.error_inputs_func is None:
                continue
            for ei in op.error_inputs(device="mtia"):
                s = ei.sample_input
                call, sync = raised_at_call(lambda: op(s.input, *s.args, **s.kwargs))
                checked += call is not None
                if sync is not None:
                    deferred.append((op.name, ei.error_regex, str(sync)[:200]))
    assert checked > 600
    assert not deferred, deferred


def test_ops_in_dtypes_cpu_lacks_raise_at_the_call():
    deferred, checked = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            supported = op.supported_dtypes("cpu")
            for dtype in DTYPES:
                if dtype in supported:
                    continue
                try:
                    s = next(iter(op.sample_inputs("cpu", dtype)))
                except Exception:  # noqa: BLE001 (OpInfo makes no sample in this dtype)
                    continue
                try:
                    op(s.input, *s.args, **s.kwargs)
                    continue  # CPU runs this sample: not an error of the dtype
                except Exception as cpu_error:  # noqa: BLE001
                    expected = type(cpu_error)
                try:
                    args, kwargs, x = to_mtia(s.args), to_mtia(s.kwargs), to_mtia(s.input)
                except NotImplementedError:  # a layout mtia does not have (sparse CSR): not this check's
                    continue
                checked += 1
                for _ in range(2):  # a first call, then a call of a known signature
                    call, sync = raised_at_call(lambda: op(x, *args, **kwargs))
                    if sync is not None or not isinstance(call, expected):
                        deferred.append((op.name, str(dtype), expected.__name__, repr(call)[:120], repr(sync)[:200]))
                        break
    assert checked > 1000
    assert not deferred, deferred
