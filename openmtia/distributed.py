"""torch.distributed on mtia: the "openmtia" c10d backend.

Registered for the "mtia" device when openmtia loads, so that
``init_process_group()`` (no backend), ``init_process_group(device_id=
torch.device("mtia", rank))`` and ``backend="mtia:openmtia,cpu:gloo"`` pick it
for mtia tensors, while CPU tensors keep Gloo.

The backend (csrc/distributed/) runs each collective as a task on a
communication stream of the device, over the device memory itself, through a
*transport*: any c10d backend of host (CPU) tensors, made by ``transport()``
below. It is Gloo, the engine shipped in the torch wheel; a port to a device
with its own collectives replaces ``transport()``. A second, tiny Gloo group exchanges each call's signature
(op, dtype, sizes) so that a mismatch across ranks raises on every rank;
``OPENMTIA_C10D_CHECK=0`` turns that exchange off.

Gloo picks its network interface as usual: ``GLOO_SOCKET_IFNAME`` names it.
"""

import os

import torch
import torch.distributed as dist

from . import _C

NAME = "openmtia"


def transport(store, rank, world_size, timeout):
    """The c10d backend that moves the bytes: collectives of host tensors
    (views of the device memory, or staged copies of it). A group of one
    rank moves nothing between processes: its collectives run in their task
    (csrc/distributed/local_transport.h)."""
    if world_size == 1:
        return _C._c10d_local_transport()
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def _sharded_tensors_know_their_mtia_device():
    """torch 2.13's ShardedTensor.device, on a rank that holds none of the
    tensor's shards, is ``torch.cuda.current_device()`` for every group but
    Gloo's (torch/distributed/_shard/sharded_tensor/_ops/tensor_ops.py): on
    mtia ranks it raised "Torch not compiled with CUDA enabled" (e.g.
    torch.distributed.checkpoint loading a TorchRec model whose table lives
    on the other rank). On a group with the openmtia backend it is the
    rank's current mtia device; other groups keep torch's answer."""
    from torch.distributed._shard.sharded_tensor import api

    getter = torch.Tensor.device.__get__
    torch_device = api._SHARDED_OPS.get(getter)
    if torch_device is None or getattr(torch_device, "_openmtia", False):
        return

    def device(types, args=(), kwargs=None, pg=None):
        st = args[0] if args else None
        if (isinstance(st, api.ShardedTensor) and not st._local_shards and pg is not None
                and NAME in str(dist.get_backend(pg))):
            return torch.device("mtia", torch.mtia.current_device())
        return torch_device(types, args, kwargs, pg)

    device._openmtia = True
    api._SHARDED_OPS[getter] = device


def _create_backend(store, rank, world_size, timeout):
    _sharded_tensors_know_their_mtia_device()
    data = transport(dist.PrefixStore("data/", store), rank, world_size, timeout)
    check = None
    if world_size > 1 and os.environ.get("OPENMTIA_C10D_CHECK", "1") != "0":  # (one rank: nothing to disagree with)
        check = dist.ProcessGroupGloo(dist.PrefixStore("check/", store), rank, world_size, timeout)
    # The rank's device: init_process_group's device_id, else the device of
    # its first collective's tensors (as NCCL guesses it).
    return _C._c10d_backend(data, check, rank, world_size, -1)


def register():
    if not dist.is_available() or not hasattr(dist, "ProcessGroupGloo"):
        return
    if NAME.upper() in dist.Backend._plugins:
        return
    # "cpu" too: a group made with backend="openmtia" alone also takes CPU
    # tensors (ordered with its mtia collectives). The default for CPU
    # tensors stays Gloo.
    dist.Backend.register_backend(NAME, _create_backend, devices=["mtia", "cpu"])
