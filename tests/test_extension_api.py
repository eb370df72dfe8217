"""openmtia._C's C extension API (csrc/python/extension_api.h), through
ctypes as another extension would call it, and the split of test-only
bindings into openmtia._C_test (built only for the tests)."""
import ctypes
import subprocess
import sys

import pytest
import torch

import openmtia

HostFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
DestroyFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Api(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("launch_on_current_stream", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                                              HostFn, ctypes.c_void_p, DestroyFn))]


def api():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ptr = get(openmtia._C._extension_api, b"openmtia.extension_api")
    a = ctypes.cast(ptr, ctypes.POINTER(Api)).contents
    assert a.struct_size >= ctypes.sizeof(Api)
    return a


def test_a_task_launched_through_the_api_runs_in_stream_order_and_is_destroyed():
    x = torch.zeros(1 << 16, device="mtia")
    torch.mtia.synchronize()
    seen, destroyed = [], []
    ref = x.cpu()

    @HostFn
    def fn(user):
        seen.append(user)  # (ctypes takes the GIL for the callback)
        return None

    @DestroyFn
    def destroy(user):
        destroyed.append(user)

    x.add_(1)  # queued before the task
    assert api().launch_on_current_stream(0, b"ext_task", fn, 1234, destroy) is None
    torch.mtia.synchronize()
    assert seen == [1234] and destroyed == [1234]
    torch.testing.assert_close(x.cpu(), ref + 1)


def test_a_failing_task_raises_at_the_next_sync_naming_it():
    msg = ctypes.create_string_buffer(b"index 5 is out of bounds")

    @HostFn
    def fn(user):
        return ctypes.addressof(msg)

    @DestroyFn
    def destroy(user):
        pass

    assert api().launch_on_current_stream(0, b"ext_gather", fn, None, destroy) is None
    with pytest.raises(RuntimeError, match="ext_gather.*index 5 is out of bounds"):
        torch.mtia.synchronize()
    torch.mtia.synchronize()  # reported once; the device stays usable
    assert torch.ones(3, device="mtia").sum().item() == 3


def test_a_bad_device_or_fn_is_an_error_message_and_the_user_data_is_destroyed():
    destroyed = []

    @HostFn
    def fn(user):
        return None

    @DestroyFn
    def destroy(user):
        destroyed.append(user)

    err = api().launch_on_current_stream(torch.mtia.device_count(), b"x", fn, 7, destroy)
    assert err is not None and b"invalid mtia device index" in err
    assert destroyed == [7]
    err = api().launch_on_current_stream(0, b"x", HostFn(), 8, destroy)  # a null fn
    assert err == b"launch_on_current_stream: fn is null"
    assert destroyed == [7, 8]
    assert torch.ones(2, device="mtia").sum().item() == 2  # the device stays usable


def test_test_only_bindings_are_not_in_c():
    code = ("import torch, openmtia; "
            "print(hasattr(openmtia._C, '_launch_blocking_task'), hasattr(openmtia._C, '_launch_failing_task'), "
            "hasattr(torch.ops.openmtia_test, 'double_a'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]
