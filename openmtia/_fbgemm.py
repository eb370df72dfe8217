"""FBGEMM's inference table-batched embedding (IntNBit TBE) placed on mtia.

TorchRec's sharded inference (torchrec.distributed.quant_embedding_kernel,
1.8.0) builds each shard's IntNBitTableBatchedEmbeddingBagsCodegen on its
device with EmbeddingLocation.HOST for every device but CUDA, and FBGEMM's
inference TBE (fbgemm_gpu 1.8.0) refuses HOST on any device but CPU
("EmbeddingLocation.HOST doesn't work for CUDA device!"): stock, the two
cannot shard a quantized model onto a device like mtia. (The unsharded
quantized modules place their tables at DEVICE, which works.)

A table of a TBE on mtia lives in the device's memory whatever TorchRec
asked for: HOST becomes DEVICE when the TBE's device is mtia, so the tables
are device memory, and the lookup reads them there
(csrc/aten/fbgemm/placements.cpp). Other devices' TBEs are unchanged.

FBGEMM is imported by the user after torch (and so after openmtia): the
change is made when fbgemm_gpu's module is first imported (_import_hooks).
"""
import inspect

import torch

from . import _import_hooks

_MODULE = "fbgemm_gpu.split_table_batched_embeddings_ops_inference"


def _tables_on_the_device(module):
    cls = getattr(module, "IntNBitTableBatchedEmbeddingBagsCodegen", None)
    if cls is None or getattr(cls.__init__, "_openmtia", False):
        return
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation

    init = cls.__init__
    signature = inspect.signature(init)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        device = bound.arguments.get("device")
        if device is not None and torch.device(device).type == "mtia":
            # (name, rows, dims, weight type, location)
            bound.arguments["embedding_specs"] = [
                (*spec[:4], EmbeddingLocation.DEVICE if spec[4] == EmbeddingLocation.HOST else spec[4], *spec[5:])
                for spec in bound.arguments["embedding_specs"]
            ]
        init(*bound.args, **bound.kwargs)

    __init__._openmtia = True
    __init__.__wrapped__ = init
    __init__.__doc__ = init.__doc__
    cls.__init__ = __init__


def install():
    _import_hooks.after_import(_MODULE, _tables_on_the_device)
