"""torch.distributed on mtia: the "openmtia" c10d backend.

Registered for the "mtia" device when openmtia loads, so that
``init_process_group()`` (no backend), ``init_process_group(device_id=
torch.device("mtia", rank))`` and ``backend="mtia:openmtia,cpu:gloo"`` pick it
for mtia tensors, while CPU tensors keep Gloo.

The backend (csrc/distributed/) runs each collective as a task on a
communication stream of the device, over the device memory itself, through a
*transport*: any c10d backend of host (CPU) tensors, made by ``transport()``
below. It is Gloo, the engine shipped in the torch wheel; a port to a device
with its own collectives replaces ``transport()``. Each collective's task
first exchanges the call's signature (op, dtype, sizes) with every rank over
sockets made here (``signature_mesh()``), and sends and receives tell their
sizes on a second, tiny Gloo group, so that a mismatch across ranks raises
on every rank; ``OPENMTIA_C10D_CHECK=0`` turns both off.

Gloo picks its network interface as usual: ``GLOO_SOCKET_IFNAME`` names it.
"""

import os
import socket

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


def _interface_address(name):
    """The IPv4 address of network interface `name` (SIOCGIFADDR)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])


def _local_address():
    """The address other ranks reach this one at: that of Gloo's interface
    (GLOO_SOCKET_IFNAME), else the one this host reaches MASTER_ADDR from."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    if ifname:
        return _interface_address(ifname.split(",")[0])
    master = os.environ.get("MASTER_ADDR")
    if master:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(master), 9))  # (no packet is sent: it picks the route)
            return s.getsockname()[0]
    return socket.gethostbyname(socket.gethostname())


def _recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RuntimeError("openmtia: a rank closed its signature connection while the group was being made")
        data += chunk
    return data


def signature_mesh(store, rank, world_size, timeout):
    """A connected TCP socket to every other rank (their file descriptors,
    -1 for this rank), for the signatures of collectives
    (csrc/distributed/signature_mesh.h): each rank listens, publishes its
    address in the group's store, connects to the ranks below it and accepts
    the ranks above it."""
    import struct

    seconds = timeout.total_seconds()
    addr = _local_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((addr, 0))
        server.listen(world_size)
        server.settimeout(seconds)
        store.set(f"mesh/{rank}", f"{addr}:{server.getsockname()[1]}")
        fds = [-1] * world_size
        try:
            for peer in range(rank):
                host, port = store.get(f"mesh/{peer}").decode().rsplit(":", 1)
                s = socket.create_connection((host, int(port)), timeout=seconds)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.sendall(struct.pack("<i", rank))
                s.settimeout(None)
                fds[peer] = s.detach()
            for _ in range(rank + 1, world_size):
                s, _ = server.accept()
                s.settimeout(seconds)
                peer = struct.unpack("<i", _recv_exact(s, 4))[0]
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
                fds[peer] = s.detach()
        except BaseException:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)
            raise
    return fds


def _create_backend(store, rank, world_size, timeout):
    _sharded_tensors_know_their_mtia_device()
    data = transport(dist.PrefixStore("data/", store), rank, world_size, timeout)
    check = mesh = None
    checking = os.environ.get("OPENMTIA_C10D_CHECK", "1") != "0"
    checksums = os.environ.get("OPENMTIA_C10D_CHECKSUM", "0")
    if checksums not in ("0", "1"):
        raise ValueError(f"OPENMTIA_C10D_CHECKSUM={checksums!r}: expected 0 or 1")
    if checksums == "1" and not checking:
        raise ValueError("OPENMTIA_C10D_CHECKSUM=1 needs the collectives' check, which OPENMTIA_C10D_CHECK=0 turns off")
    if world_size > 1 and checking:  # (one rank: nothing to disagree with)
        check = dist.ProcessGroupGloo(dist.PrefixStore("check/", store), rank, world_size, timeout)
        mesh = signature_mesh(dist.PrefixStore("check/", store), rank, world_size, timeout)
    # The rank's device: init_process_group's device_id, else the device of
    # its first collective's tensors (as NCCL guesses it).
    return _C._c10d_backend(data, check, mesh, rank, world_size, -1, timeout.total_seconds(), checksums == "1")


def _keep_gloo_for_cpu_tensors():
    """``init_process_group()`` without a backend (and ``new_group()`` on such
    a group): torch 2.13 makes a backend for the accelerator alone
    (``BackendConfig``: {"mtia": "openmtia"} once mtia is the accelerator),
    so CPU tensors, which had Gloo before openmtia was installed, found no
    backend ("No backend type associated with device type cpu"). CPU keeps
    its own default, Gloo, beside mtia's: as torch's default config of both
    devices, "cpu:gloo,cuda:nccl". Other configurations are left as torch
    made them."""
    config = dist.distributed_c10d.BackendConfig
    init = config.__init__
    if getattr(init, "_openmtia", False):
        return

    def __init__(self, backend):
        init(self, backend)
        m = self.device_backend_map
        if (str(backend) == dist.Backend.UNDEFINED and m.get("mtia") == NAME and "cpu" not in m
                and dist.is_gloo_available()):
            self.device_backend_map = {"cpu": dist.Backend(dist.Backend.GLOO), **m}

    __init__._openmtia = True
    config.__init__ = __init__


def register():
    if not dist.is_available() or not hasattr(dist, "ProcessGroupGloo"):
        return
    if NAME.upper() in dist.Backend._plugins:
        return
    _keep_gloo_for_cpu_tensors()
    # "cpu" too: a group made with backend="openmtia" alone also takes CPU
    # tensors (ordered with its mtia collectives). The default for CPU
    # tensors stays Gloo.
    dist.Backend.register_backend(NAME, _create_backend, devices=["mtia", "cpu"])
