"""Faults on demand: the emulated device fails as a real one would, when a
test asks it to (docs/faults.md).

    import openmtia.faults as faults
    with faults.injected("kernel", op="aten::mm"):
        y = a @ b                  # returns; the device faults in the kernel
        torch.mtia.synchronize()   # RuntimeError: ... 'aten::mm' ...

Kinds: "oom" (a device allocation runs out of memory: the caching
allocator frees its cache and retries, then raises torch.OutOfMemoryError
after calling the out-of-memory observers), "pinned_oom" (a pinned host
allocation), "kernel" (a piece of work faults instead of running: its
stream's error, torch.AcceleratorError at the next synchronization, as
CUDA's; with sticky=True the device's context is lost too: every later call
on it raises, until the process restarts), "lost" (at a piece of work the
device falls off the bus: that work and the work queued after it never
run, and every later call on the device raises torch.AcceleratorError
saying it is lost; other devices go on), "hang" (a piece of work hangs its
stream: its synchronization blocks, with no timeout, as CUDA's; c10d's
timeouts catch a hung collective; clear() releases it: it fails, not run,
and the stream goes on), "corrupt" (a collective's received payload has one
bit flipped: silently, unless OPENMTIA_C10D_CHECKSUM=1 makes every rank
raise at the next synchronization).

Settings (each optional): device=D and, for kernels, lost devices, hangs and corruption,
stream=S (a stream's id) and op=NAME (the work's name: the aten op,
"aten::mm"), for kernels sticky=True; after=N (the
N-th matching event from now fails first; 1, the next, by default),
times=N (how many fail from there; 1 by default, 0: every one), or
rate=P with seed=N (each matching event fails with probability P, the
same ones for the same seed); rank=R (only on that rank); restart=N (only
in the N-th restart of a torchrun job: TORCHELASTIC_RESTART_COUNT, 0 for
its first run, so that a restarted job runs without the fault).

The environment variable OPENMTIA_FAULTS takes the same faults, for an
unmodified program or a torchrun job: "kernel:op=aten::mm,after=3;oom:device=1;lost:device=1,after=100".
The emulated driver injects them; with the reference driver, inject()
raises RuntimeError ("injects no faults").
"""
import contextlib
import os

from . import _C

__all__ = ["inject", "clear", "injected"]


def _rank():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _spec(kind, settings):
    parts = []
    for key, value in settings.items():
        if value is None:
            continue
        if key == "stream" and hasattr(value, "stream_id"):
            value = value.stream_id  # a torch.Stream
        if isinstance(value, bool):
            value = int(value)
        parts.append(f"{key}={value}")
    return kind + (":" + ",".join(parts) if parts else "")


def inject(kind, **settings):
    """Arms a fault: `kind` ("oom", "pinned_oom", "kernel", "lost", "hang", "corrupt") with the
    settings above. Raises ValueError for an unknown kind or setting."""
    spec = _spec(kind, settings)
    if ";" in spec:
        raise ValueError(f"one fault at a time: {spec!r}")
    try:
        _C._inject_faults(spec, _rank(), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    except RuntimeError as e:
        if str(e).startswith("fault '"):  # (the parser's: a bad kind or setting)
            raise ValueError(str(e)) from None
        raise


def clear():
    """Disarms every fault (OPENMTIA_FAULTS's too), and releases hung work."""
    _C._clear_faults()


@contextlib.contextmanager
def injected(kind, **settings):
    """Arms a fault for the block; at its end, disarms every fault."""
    inject(kind, **settings)
    try:
        yield
    finally:
        clear()
