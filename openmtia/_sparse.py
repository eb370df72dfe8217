"""Tensor.new for sparse mtia tensors.

torch's legacy constructor (`Tensor.new`, which torch.optim.SparseAdam and
Adagrad call on sparse gradients) maps a tensor's dispatch key to a
`c10::Backend`, and torch 2.13's Backend has no SparseMTIA: on a sparse mtia
tensor it raises "Unrecognized tensor type ID: SparseMTIA". For sparse COO
mtia tensors, `new` is done here with the same overloads (those of a sparse
CPU tensor); every other tensor calls torch's own.
"""
import torch

_torch_new = torch._C.TensorBase.new


def _sparse_new(self, *args, device=None):
    if device is not None and torch.device(device) != self.device:
        raise RuntimeError(f"legacy constructor expects device type: {self.device.type} but device type: "
                           f"{torch.device(device).type} was passed")
    if not args:  # new(): an empty tensor of self's kind
        return torch.empty((0,), dtype=self.dtype, layout=torch.sparse_coo, device=self.device)
    if isinstance(args[0], torch.Tensor):  # new(indices, values[, size])
        if len(args) not in (2, 3):
            raise TypeError("new() of a sparse tensor takes (indices, values) or (indices, values, size)")
        return torch.sparse_coo_tensor(*args, dtype=args[1].dtype, device=self.device)
    sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    return torch.empty(tuple(sizes), dtype=self.dtype, layout=torch.sparse_coo, device=self.device)


def new(self, *args, **kwargs):
    if self.layout is torch.sparse_coo and self.device.type == "mtia":
        return _sparse_new(self, *args, **kwargs)
    return _torch_new(self, *args, **kwargs)


new.__doc__ = _torch_new.__doc__


def install():
    if getattr(torch.Tensor.new, "__module__", None) != __name__:
        torch.Tensor.new = new
