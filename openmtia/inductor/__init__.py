"""torch.compile on mtia: openmtia's Inductor backend.

The stock wheel registers mtia with Triton scheduling and a wrapper that imports
a closed module, the first time Inductor initializes its backends
(`torch._inductor.codegen.common.init_backend_registration`). A registration
made earlier wins, so openmtia registers first: when that module is imported
(never at `import torch`: Inductor is imported only when something compiles),
an import hook wraps `init_backend_registration` so that it registers mtia
before the stock registrations run.

Two backends, chosen by ``OPENMTIA_INDUCTOR_BACKEND``:

- ``cpp`` (the default): Inductor's C++ codegen, with kernels that run as tasks
  on the mtia streams (`openmtia.inductor.cpp`). Its kernels are CPU-style
  loops, so Inductor makes its CPU decisions for mtia (no Triton, no reduction
  splits across SMs): mtia leaves `torch._inductor.utils.GPU_TYPES`, the list
  Inductor's `is_gpu` reads.
- ``triton``: MTIA's production path, Inductor's Triton scheduling, kernels
  run by Triton's CPU interpreter on the device memory
  (`openmtia.inductor.triton`).
"""
import functools
import os
import sys

from .._import_hooks import after_import

BACKENDS = ("cpp", "triton")


def backend():
    """The Inductor backend of mtia in this process (OPENMTIA_INDUCTOR_BACKEND)."""
    name = os.environ.get("OPENMTIA_INDUCTOR_BACKEND", "cpp")
    if name not in BACKENDS:
        raise ValueError(f"OPENMTIA_INDUCTOR_BACKEND={name!r}: expected one of {', '.join(BACKENDS)}")
    return name


def _codegen_version():
    """A post-grad pass that does nothing but put openmtia's codegen (its
    backend and sources) into the key of Inductor's caches, so code compiled by
    another backend or version of openmtia is never reused."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

    here = os.path.dirname(os.path.abspath(__file__))
    files = tuple(sorted(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")))

    class CodegenVersion(CustomGraphModulePass):
        def __call__(self, gm):
            pass

        def uuid(self):
            return get_hash_for_files(files, extra=backend())

    return CodegenVersion()


def _register(common):
    from . import graphs

    graphs.install()  # mode="reduce-overhead" on mtia
    if backend() == "cpp":
        from .cpp import MtiaCppScheduling, MtiaWrapperCodegen, mtia_nodes_are_cpp_nodes
        from .cpp_wrapper import MtiaCppWrapper, call_kept_ops_through_the_shim, register_device_op_overrides

        mtia_nodes_are_cpp_nodes()
        register_device_op_overrides(common)
        call_kept_ops_through_the_shim()
        common.register_backend_for_device(
            "mtia", MtiaCppScheduling, MtiaWrapperCodegen, MtiaCppWrapper, device_custom_pass=_codegen_version()
        )
    else:
        from .triton import register
        register(common, _codegen_version())


def _after_common(common):
    stock = common.init_backend_registration

    @functools.cache
    def init_backend_registration():
        if common.get_scheduling_for_device("mtia") is None:
            _register(common)
        stock()

    common.init_backend_registration = init_backend_registration


def _after_utils(utils):
    if backend() != "cpp" or getattr(utils.get_current_backend, "_openmtia", False):
        return
    # Inductor's two switches of codegen style: is_gpu() (the GPU_TYPES list)
    # and get_current_backend() (the codegen of the current device, which
    # answers config.cuda_backend, "triton", for any device it does not know).
    # mtia's kernels are C++ ones. Both hooks run before any other module
    # imports these names from utils.
    if "mtia" in utils.GPU_TYPES:
        utils.GPU_TYPES.remove("mtia")
    stock = utils.get_current_backend

    def get_current_backend(device_type=None):
        from torch._inductor.virtualized import V

        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == "mtia" else stock(device_type)

    get_current_backend._openmtia = True
    utils.get_current_backend = get_current_backend


def _after_lowering(lowering):
    # MTIA's rule: aten.native_layer_norm stays one device kernel in compiled
    # code. Inductor keeps the forward (a decomposition that declines mtia
    # inputs, and a fallback lowering); openmtia does the same for the backward,
    # which Inductor otherwise decomposes for every device.
    import torch
    from torch._inductor.decomposition import decompositions

    op = torch.ops.aten.native_layer_norm_backward.default
    decompose = decompositions.get(op)
    if decompose is None or getattr(decompose, "_openmtia", False):
        return

    def native_layer_norm_backward(grad_out, input, *args, **kwargs):
        if input.is_mtia:
            return NotImplemented
        return decompose(grad_out, input, *args, **kwargs)

    native_layer_norm_backward._openmtia = True
    decompositions[op] = native_layer_norm_backward
    lowering.make_fallback(torch.ops.aten.native_layer_norm_backward, warn=False, override_decomp=True)


def _after_cpp_utils(cpp_utils):
    # the C++ wrapper names a device by its c10 enum (codegen_device), and an
    # AOTInductor model checks its inputs' device type by its number
    cpp_utils.DEVICE_TO_ATEN.setdefault("mtia", "at::kMTIA")
    cpp_utils.DEVICE_TO_INT.setdefault("mtia", 19)  # c10::DeviceType::MTIA


def _after_cpp_builder(cpp_builder):
    # code generated for mtia compiles against openmtia's shim header and
    # links libopenmtia_aoti.so (openmtia/inductor/cpp_wrapper.py)
    stock = cpp_builder.get_cpp_torch_device_options
    if getattr(stock, "_openmtia", False):
        return

    def get_cpp_torch_device_options(device_type, aot_mode=False, compile_only=False):
        options = stock(device_type, aot_mode=aot_mode, compile_only=compile_only)
        if device_type != "mtia":
            return options
        from .cpp_wrapper import build_options

        definitions, include_dirs, cflags, ldflags, lib_dirs, libraries, passthrough = options
        more_includes, more_lib_dirs, more_libraries = build_options()
        return (definitions, include_dirs + more_includes, cflags, ldflags, lib_dirs + more_lib_dirs,
                libraries + more_libraries, passthrough)

    get_cpp_torch_device_options._openmtia = True
    cpp_builder.get_cpp_torch_device_options = get_cpp_torch_device_options


def _after_codecache(codecache):
    # the C++ wrapper's precompiled header: the CPU's (torch has no mtia one;
    # the mtia part is openmtia/aoti_mtia.h, included after it)
    stock = codecache._get_cpp_wrapper_header
    if getattr(stock, "_openmtia", False):
        return

    def _get_cpp_wrapper_header(device, aot_mode=False):
        if device.split(":", 1)[0] == "mtia":
            return "torch/csrc/inductor/" + ("aoti_include" if aot_mode else "cpp_wrapper") + "/cpu.h"
        return stock(device, aot_mode)

    _get_cpp_wrapper_header._openmtia = True
    codecache._get_cpp_wrapper_header = _get_cpp_wrapper_header


def _after_compile_fx(compile_fx):
    # AOTInductor: what the exported program allows each dynamic dimension
    # (its module()'s range_constraints), for mtia's input checks
    stock = compile_fx.compile_fx_aot
    if getattr(stock, "_openmtia", False):
        return

    def compile_fx_aot(model_, *args, **kwargs):
        from .cpp_wrapper import exported_ranges

        with exported_ranges(getattr(model_, "range_constraints", None)):
            return stock(model_, *args, **kwargs)

    compile_fx_aot._openmtia = True
    compile_fx.compile_fx_aot = compile_fx_aot


_HOOKS = {
    "torch._inductor.compile_fx": _after_compile_fx,
    "torch._inductor.codegen.common": _after_common,
    "torch._inductor.codegen.cpp_utils": _after_cpp_utils,
    "torch._inductor.cpp_builder": _after_cpp_builder,
    "torch._inductor.codecache": _after_codecache,
    "torch._inductor.utils": _after_utils,
    "torch._inductor.lowering": _after_lowering,
}


def install():
    """Called at autoload. Validates the backend choice now, so a typo fails early."""
    if backend() == "triton":
        # Triton's CPU interpreter runs the kernels; Triton reads this when it
        # defines a kernel, so it must be set before any is defined
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for name, after in _HOOKS.items():
        after_import(name, after)
    common = sys.modules.get("torch._inductor.codegen.common")
    if common is not None:  # its registrations may have run: replace mtia's
        _register(common)
