"""The default Inductor backend of mtia: C++ kernels that run on the device's streams.

Inductor's C++ scheduling generates the kernels, exactly as for the CPU: the
emulated device's memory is host-addressable, so a CPU loop over device
pointers is the device kernel. What differs is where they run:

- `MtiaWrapperCodegen` generates the host code. It allocates buffers on the
  buffer's mtia device through the caching allocator (`empty_strided_mtia`),
  and defines each kernel with `openmtia_cpp_kernel` instead of a Python
  binding.
- `openmtia_cpp_kernel` compiles the kernel with Inductor's CppCodeCache (in
  Inductor's compile workers, like the CPU's kernels), adds an entry point that
  takes the arguments as 64-bit slots, and returns a `_C._CompiledKernel`.
  Calling it launches the kernel as a task on the current stream of the
  tensors' device (csrc/compile/kernels.cpp): asynchronous, in order with the
  eager ops, and capturable into an MTIAGraph.

Extern kernels (mm, convolution, native_layer_norm, ...) are called through the
dispatcher on mtia tensors: they are the eager mtia kernels.
"""
import ctypes

from torch._inductor.async_compile import get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.virtualized import V
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

from .. import _C

_PYBINDING = "async_compile.cpp_pybinding("
_LOADER = "openmtia_cpp_kernel(async_compile, "


class MtiaCppScheduling(CppScheduling):
    """Inductor's C++ scheduling, for kernels over mtia memory."""


def _kind(argtype):
    """The slot kind of a kernel argument type: 'p' pointer to read, 'w' pointer
    to write, 'f' floating-point scalar, 'i' integer."""
    argtype = argtype.strip()
    if argtype.endswith("*"):
        return "p" if argtype.startswith("const ") else "w"
    base = argtype.replace("const", "").strip()
    return "f" if base in ("float", "double") else "i"


def _entry_source(argtypes):
    """C++ for `openmtia_entry(const int64_t* s)`, which calls the kernel with each slot."""
    args = []
    for i, argtype in enumerate(argtypes):
        kind = _kind(argtype)
        if kind in "pw":
            args.append(f"reinterpret_cast<{argtype}>(s[{i}])")
        elif kind == "f":
            args.append(f"static_cast<{argtype}>(openmtia_slot_double(s[{i}]))")
        else:
            args.append(f"static_cast<{argtype}>(s[{i}])")
    return (
        "\nstatic inline double openmtia_slot_double(int64_t bits) {\n"
        "    double d; __builtin_memcpy(&d, &bits, sizeof d); return d;\n}\n"
        'extern "C" void openmtia_entry(const int64_t* s) {\n'
        f"    kernel({', '.join(args)});\n}}\n"
    )


def _load(lib, name, kinds):
    entry = ctypes.cast(lib.openmtia_entry, ctypes.c_void_p).value
    return _C._CompiledKernel(entry, name, kinds)


def openmtia_cpp_kernel(async_compile, name, argtypes, source_code):
    """Compiles one generated C++ kernel; returns its launcher (or a future of it)."""
    kinds = "".join(_kind(t) for t in argtypes)
    source_code = source_code + _entry_source(argtypes)
    if get_compile_threads() <= 1:
        return _load(CppCodeCache.load(source_code), name, kinds)
    get_result = CppCodeCache.load_async(source_code, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: _load(get_result(), name, kinds))


class _MtiaDefinitions:
    """What the mtia wrappers, top-level and subgraph, generate differently."""

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
        if not gpu and V.graph.get_current_device_or_throw().type == "mtia":
            assert kernel_body.startswith(_PYBINDING), kernel_body[:200]
            kernel_body = _LOADER + repr(kernel_name) + ", " + kernel_body[len(_PYBINDING):]
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == "mtia":  # a C++ kernel: its launcher picks the stream
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == "mtia" and device.index is not None:
            # the generated code sets no current device: allocate on the buffer's
            call, end = f"{name} = empty_strided_mtia(", f", {dtype})"
            assert line.startswith(call) and end in line, line
            line = line.replace(end, f", {dtype}, {device.index})", 1)
        return line


class MtiaSubgraphWrapperCodegen(_MtiaDefinitions, SubgraphPythonWrapperCodegen):
    pass


class MtiaWrapperCodegen(_MtiaDefinitions, PythonWrapperCodegen):
    """The Python wrapper of compiled mtia graphs."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return MtiaSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return MtiaWrapperCodegen()

    def write_header(self):
        super().write_header()
        self.imports.splice(
            """
            from openmtia._C import _empty_strided as openmtia_empty_strided
            from openmtia.inductor.cpp import openmtia_cpp_kernel
            """,
            strip=True,
        )
        self.header.writeline("empty_strided_mtia = openmtia_empty_strided")
