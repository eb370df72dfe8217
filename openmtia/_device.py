"""Loads the device: openmtia._C (hooks, guard, allocator, kernels, fallback),
then torch.compile's and torch.distributed's registrations. Imported by the
package's __init__ once it knows the extension is there."""
import atexit
import os

import torch

from . import _C  # registers hooks, guard, allocator, kernels and fallback

if _C._driver_error():
    # no driver (OPENMTIA_DRIVER): mtia is unavailable, not a crash
    import warnings

    warnings.warn(f"openmtia: mtia is unavailable: {_C._driver_error()}", RuntimeWarning, stacklevel=2)

# torch.mtia reads its per-device default generators from this tuple.
torch.mtia.default_generators = _C._default_generators()



def _capture_on_a_dedicated_stream():
    # torch.mtia.graph captures on graph.default_capture_stream, which torch
    # sets to the current stream at first use: usually the default stream, on
    # which capture is not permitted (as on CUDA). openmtia documents a
    # dedicated capture stream instead: a stream of the pool, made at first use.
    graph_cls = torch.mtia.graph
    init = graph_cls.__init__

    def __init__(self, mtia_graph, pool=None, stream=None):
        if type(self).default_capture_stream is None:
            type(self).default_capture_stream = torch.mtia.Stream()
        init(self, mtia_graph, pool, stream)

    graph_cls.__init__ = __init__


_capture_on_a_dedicated_stream()


def _autograd_device_threads_started():
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().startswith("pt_autograd_"):
                    return True
        except OSError:
            continue  # that thread has ended
    return False


def _at_exit():
    # Before Python finalizes (csrc/runtime/process_exit.cpp). Registered at import, so
    # it runs after the atexit handlers of code that imported torch.
    # 1. Autograd's device threads must not hold the last reference to a graph
    #    task (it holds Python objects), or the process aborts at exit. Only if
    #    backward ever used them.
    if _autograd_device_threads_started():
        _C._settle_autograd_device_threads()
    # 2. Every task launched so far runs, then the stream workers end: none may
    #    run while the interpreter and C++ static destructors tear down what
    #    tasks use. Later launches run on the launching thread.
    _C._stop_device_workers()


atexit.register(_at_exit)

from . import _sparse

_sparse.install()  # Tensor.new of sparse mtia tensors (torch's legacy constructor lacks SparseMTIA)

from . import inductor as _inductor

_inductor.install()  # torch.compile: registers mtia with Inductor when Inductor loads

from . import _fbgemm

_fbgemm.install()  # FBGEMM's inference TBE: tables of a TBE on mtia in its memory (TorchRec's sharded inference)

from . import _profiler

_profiler.install()  # torch.profiler: distributedInfo names mtia's backend as a real MTIA's trace

from . import distributed as _distributed

_distributed.register()  # torch.distributed: the "openmtia" c10d backend for mtia tensors


def device_memory_info(device=None):
    """(free, total) bytes of an mtia device's memory."""
    idx = torch.mtia._utils._get_device_index(device, optional=True)
    return _C._device_memory_info(idx)
