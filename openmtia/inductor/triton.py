"""The Triton path of mtia (OPENMTIA_INDUCTOR_BACKEND=triton): MTIA's production
codegen, runnable without MTIA hardware.

Inductor schedules mtia kernels with its Triton scheduling, as the stock wheel
does (fusion, combo kernels and their `combo_kernel_max_num_args`, the
`max_fusion_unique_io_buffers` guardrail), with openmtia's wrapper instead of
the closed `PythonWrapperMtia`. The kernels run in Triton's CPU interpreter
(TRITON_INTERPRET=1, set by openmtia at import in this mode). Triton needs an
active driver and a compiler for the target even to interpret (Inductor
compiles every kernel ahead of time): openmtia's Triton backend plugin
(`openmtia_triton`, entry point group "triton.backends") provides both.
"""
import sys
import types

import torch
from torch._inductor.codegen.triton import TritonScheduling

from .. import _C
from .wrapper import wrapper_classes


class _TritonKernels:
    """Triton kernels keep Inductor's launch code."""


MtiaTritonWrapperCodegen, MtiaTritonSubgraphWrapperCodegen = wrapper_classes(_TritonKernels, "")


def _closed_runtime_flags():
    # Inductor asks MTIA's closed runtime for the Triton target's architecture
    # (mtia.host_runtime.torch_mtia.acc_flags.build_codename): the one
    # openmtia's Triton backend compiles for
    if "mtia.host_runtime.torch_mtia.acc_flags" not in sys.modules:
        flags = types.ModuleType("mtia.host_runtime.torch_mtia.acc_flags")
        flags.build_codename = lambda: 80
        sys.modules["mtia.host_runtime.torch_mtia.acc_flags"] = flags


def _interpret_over_device_memory():
    """Triton's interpreter stages every tensor argument through a host copy of
    its storage. Where mtia memory is host-addressable, an interpreted launch
    on mtia tensors waits for the current stream, then runs over host views of
    the device memory itself, on the calling thread, so it is ordered with the
    stream's work before and after it."""
    from torch.utils._pytree import tree_map
    from triton.runtime import interpreter

    stock = interpreter.GridExecutor.__call__
    if getattr(stock, "_openmtia", False):
        return

    def __call__(self, *args, **kwargs):
        devices = {a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_mtia}
        if not devices:
            return stock(self, *args, **kwargs)
        if not all(torch.mtia.get_device_properties(d)["host_addressable"] for d in devices):
            # device memory the host cannot touch (OPENMTIA_STRICT_MEMORY=1):
            # Triton's own staging, host copies of the storages written back
            return stock(self, *args, **kwargs)
        for device in devices:
            torch.mtia.current_stream(device).synchronize()

        def host(a):
            return _C._host_view(a) if isinstance(a, torch.Tensor) and a.is_mtia else a

        return stock(self, *tree_map(host, args), **tree_map(host, kwargs))

    __call__._openmtia = True
    interpreter.GridExecutor.__call__ = __call__


def _libdevice_in_the_interpreter():
    """Inductor's Triton kernels call libdevice (tanh, erf, rsqrt, ...), which
    Triton's interpreter does not run: its libdevice module is stubs (compiled
    code maps it to a backend's), and extern calls raise NotImplementedError.
    openmtia maps the stubs to the CUDA libdevice module and runs its extern
    calls with NumPy, by symbol (an unknown one raises, naming it)."""
    import math

    import numpy as np
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as stubs
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_extern_elementwise, "_openmtia", False):
        return
    for name in dir(stubs):
        if not name.startswith("_") and callable(getattr(cuda_libdevice, name, None)):
            setattr(stubs, name, getattr(cuda_libdevice, name))

    def vectorized(f):
        return np.vectorize(f, otypes=[np.float64])

    fns = {
        "abs": np.abs, "fabs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin,
        "asinh": np.arcsinh, "atan": np.arctan, "atan2": np.arctan2, "atanh": np.arctanh, "cbrt": np.cbrt,
        "ceil": np.ceil, "copysign": np.copysign, "cos": np.cos, "cosh": np.cosh, "erf": vectorized(math.erf),
        "erfc": vectorized(math.erfc), "exp": np.exp, "exp10": lambda x: np.power(10.0, x), "exp2": np.exp2,
        "expm1": np.expm1, "floor": np.floor, "fmax": np.fmax, "fmin": np.fmin, "fmod": np.fmod,
        "hypot": np.hypot, "isinf": np.isinf, "isnan": np.isnan, "isfinited": np.isfinite,
        "lgamma": vectorized(math.lgamma), "log": np.log, "log10": np.log10, "log1p": np.log1p, "log2": np.log2,
        "nearbyint": np.rint, "nextafter": np.nextafter, "pow": np.power, "rint": np.rint,
        "round": lambda x: np.trunc(x + np.copysign(0.5, x)), "rsqrt": lambda x: 1.0 / np.sqrt(x),
        "signbit": np.signbit, "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "tan": np.tan, "tanh": np.tanh,
        "tgamma": vectorized(math.gamma), "trunc": np.trunc,
    }

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        name = symbol[len("__nv_"):] if symbol.startswith("__nv_") else symbol
        fn = fns.get(name) or (fns.get(name[:-1]) if name.endswith("f") else None)
        if fn is None:
            raise NotImplementedError(f"openmtia: libdevice {symbol} in Triton's interpreter")
        out = np.asarray(fn(*[a.data for a in argList]))
        scalar = getattr(retType, "scalar", retType)
        return interpreter.TensorHandle(out.astype(interpreter._get_np_dtype(scalar)), scalar)

    create_extern_elementwise._openmtia = True
    builder.create_extern_elementwise = create_extern_elementwise

    patch_lang = interpreter._patch_lang

    def _patch_lang(fn):  # libdevice's builtins get the interpreter's semantic too
        scope = patch_lang(fn)
        interpreter._patch_builtin(stubs, interpreter.interpreter_builder, scope)
        return scope

    interpreter._patch_lang = _patch_lang


def register(common, custom_pass):
    _closed_runtime_flags()
    _interpret_over_device_memory()
    _libdevice_in_the_interpreter()
    from .cpp_wrapper import TritonPathCppWrapper

    common.register_backend_for_device(
        "mtia", TritonScheduling, MtiaTritonWrapperCodegen, TritonPathCppWrapper, device_custom_pass=custom_pass)
