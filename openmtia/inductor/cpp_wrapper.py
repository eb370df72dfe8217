"""mtia's C++ wrapper: the host code of torch.compile with ``cpp_wrapper=True``
and of AOTInductor packages.

Inductor's ``CppWrapperCpu`` generates C++ host code that calls the C++
kernels in the same library directly, on the calling thread. For mtia it
differs in three places, each as the Python wrapper (`openmtia.inductor.cpp`)
does it:

- **Kernels run as device tasks.** Each kernel call becomes a launch on the
  current stream of the tensors' mtia device (``openmtia_aoti_launch_kernel``,
  csrc/aoti/aoti_mtia.h): its arguments are read now (data pointers, sizes),
  the call runs in order with the eager ops around it, and the wrapper returns
  before the kernels have run. A CPU tensor a kernel only reads (a scalar) is
  passed by value, as CUDA passes CPU scalars; any other tensor not on the
  kernel's device raises naming both.
- **Ops Inductor does not compile** call mtia's C shim ``aoti_torch_mtia_<op>``
  (tools/gen_aoti_shim.py), which calls the op through the dispatcher: the
  eager mtia kernel, on the current stream. The shim also has the ops mtia
  keeps whole (``native_layer_norm``, shim_ops.py), which other devices
  decompose, so they are direct calls too, not torch's proxy executor.
- **Buffers** are ``aoti_torch_empty_strided`` on mtia (c10::DeviceType 19,
  ``aoti_torch_device_type_mtia``): openmtia's caching allocator.

The generated library links ``libopenmtia_aoti.so`` (beside openmtia._C),
which holds the two functions above and links libtorch only; it finds the
runtime through the dispatcher (the op ``openmtia::_aoti_launch``).
"""
import contextlib
import contextvars
import os

from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.virtualized import V

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE_DIR = os.path.join(PACKAGE_DIR, "include")
LIBRARY = "openmtia_aoti"


def build_options():
    """(include dirs, library dirs, libraries) that code generated for mtia
    compiles and links with. No rpath: openmtia._C links the library, so a
    process that runs mtia code has it loaded, and a C++ program links it."""
    header = os.path.join(INCLUDE_DIR, "openmtia", "aoti_mtia.h")
    library = os.path.join(PACKAGE_DIR, f"lib{LIBRARY}.so")
    for path in (header, library):
        if not os.path.exists(path):
            raise RuntimeError(f"openmtia's C++ wrapper needs {path}, which this build of openmtia lacks: "
                               "rebuild it (pip install --no-build-isolation -e .)")
    return [INCLUDE_DIR], [PACKAGE_DIR], [LIBRARY]


# The range constraints of the exported program being compiled
# (ExportedProgram.range_constraints, which its module() carries): set by
# exported_ranges() around compile_fx_aot.
_EXPORTED_RANGES = contextvars.ContextVar("openmtia_exported_ranges", default=None)


@contextlib.contextmanager
def exported_ranges(ranges):
    token = _EXPORTED_RANGES.set(ranges or None)
    try:
        yield
    finally:
        _EXPORTED_RANGES.reset(token)


@contextlib.contextmanager
def _exported_lower_bounds(shape_env):
    """The shape environment's ranges with each dynamic dimension's lower
    bound as exported. Inductor's ranges start backed sizes at 2 (its 0/1
    specialization), but an export with Dim(min=1) promises its program for
    size 1 too (ExportedProgram.range_constraints: [1, max]), and CPU's
    package runs it: the input checks must accept what the export accepts."""
    ranges = _EXPORTED_RANGES.get()
    saved = shape_env.var_to_range
    if not ranges:
        yield
        return
    from torch.utils._sympy.value_ranges import ValueRanges

    widened = dict(saved)
    for symbol, exported in ranges.items():
        inductor = widened.get(symbol)
        if inductor is not None and exported.lower < inductor.lower:
            widened[symbol] = ValueRanges(exported.lower, inductor.upper)
    shape_env.var_to_range = widened
    try:
        yield
    finally:
        shape_env.var_to_range = saved


def register_device_op_overrides(common):
    """torch's mtia DeviceOpOverrides (the Python wrapper's stream and device
    lines) plus what the C++ wrapper asks of a device whose kernels are C++
    functions. torch registers its own the first time any is looked up (by
    importing its module): import it first, so that ours stays."""
    from torch._inductor.codegen.mtia.device_op_overrides import MTIADeviceOpOverrides

    class MtiaDeviceOpOverrides(MTIADeviceOpOverrides):
        def cpp_kernel_type(self):
            return "void*"  # the model's kernel members (C++ functions in the same library), as CPU's

    common.register_device_op_overrides("mtia", MtiaDeviceOpOverrides())


def call_kept_ops_through_the_shim():
    """The ops mtia keeps whole (shim_ops.EXTRA_SHIM_OPS) through mtia's C
    shim, as the ops of torchgen's inductor_fallback_ops are, instead of
    torch's proxy executor. Inductor chooses between the two by looking the op
    up in that table while it generates a fallback op's call: for mtia's C++
    wrapper, the op is in it for the length of that call (the table stays
    torch's for every other device, which has no such shim)."""
    from torch._inductor import ir
    from torchgen.aoti import fallback_ops

    from .shim_ops import EXTRA_SHIM_OPS

    codegen = ir.FallbackKernel.codegen
    if getattr(codegen, "_openmtia", False):
        return

    def fallback_kernel_codegen(self, wrapper):
        table = fallback_ops.inductor_fallback_ops
        name = str(self.op_overload)
        if not isinstance(wrapper, MtiaCppWrapper) or name not in EXTRA_SHIM_OPS or name in table:
            return codegen(self, wrapper)
        table[name] = EXTRA_SHIM_OPS[name]
        try:
            return codegen(self, wrapper)
        finally:
            del table[name]

    fallback_kernel_codegen._openmtia = True
    ir.FallbackKernel.codegen = fallback_kernel_codegen


class MtiaCppWrapper(CppWrapperCpu):
    """Inductor's C++ wrapper with mtia's kernel launches, shims and buffers."""

    def __init__(self):
        self.device = "mtia"  # CppWrapperCpu keeps a device set before its __init__
        super().__init__()

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        return MtiaCppWrapper()

    def add_device_include(self, device):
        if device != "mtia":
            return super().add_device_include(device)
        # the host side is the CPU's (torch's headers have no mtia flavour),
        # plus mtia's shim
        super().add_device_include("cpu")
        if "mtia" not in self.included_devices:
            self.included_devices.add("mtia")
            self.header.splice("#include <openmtia/aoti_mtia.h>")

    def codegen_model_constructor(self):
        # torch's model base parses cpu/cuda/xpu/mps device strings only: it
        # gets "cpu", and the constructor's body sets the mtia device
        # (openmtia_aoti_model_device: "mtia" or "mtia:N", else it throws)
        start = len(self.prefix._lines)
        super().codegen_model_constructor()
        lines = self.prefix._lines
        base = next(i for i in range(start, len(lines))
                    if isinstance(lines[i], str) and "AOTInductorModelBase(" in lines[i])
        arg = next(i for i in range(base, len(lines)) if isinstance(lines[i], str) and lines[i].strip() == "device_str,")
        lines[arg] = lines[arg].replace("device_str,", 'std::string("cpu"),')
        body = next(i for i in range(arg, len(lines)) if isinstance(lines[i], str) and lines[i].rstrip().endswith("{"))
        lines.insert(body + 1, "    openmtia_aoti_model_device(device_str, device_type_, device_idx_);")
        # the weights compiled into the library, into mtia memory
        # (openmtia_aoti_load_constants_to_device), once the constants are set up
        end = next(i for i in range(len(lines) - 1, body, -1) if isinstance(lines[i], str) and lines[i].strip() == "}")
        lines.insert(end, "    openmtia_aoti_load_constants_to_device(*this, constants_map_, constants_info_, constant_blob_, "
                          "device_type_, device_idx_, include_weights);")

    _CHECK_INPUTS_OFF = "const static bool result = env_var_value != nullptr && env_var_value[0] != '0';"
    _CHECK_INPUTS_ON = "const static bool result = env_var_value == nullptr || env_var_value[0] != '0';"

    def finalize_prefix(self):
        super().finalize_prefix()
        # An AOTInductor model checks each input's device type, dtype, sizes
        # and strides against the package's only when AOTI_RUNTIME_CHECK_INPUTS
        # is set; a wrong dtype then runs the kernels on misread memory. mtia
        # models check unless it is set to 0 (a few comparisons per input).
        lines = self.prefix._lines
        for i, line in enumerate(lines):
            if isinstance(line, str) and line.strip() == self._CHECK_INPUTS_OFF:
                lines[i] = line.replace(self._CHECK_INPUTS_OFF, self._CHECK_INPUTS_ON)

    def generate_input_output_runtime_checks(self):
        with _exported_lower_bounds(V.graph.sizevars.shape_env):
            super().generate_input_output_runtime_checks()

    def _device_index_expr(self, device):
        if V.graph.aot_mode:
            return "this->device_idx_"  # the package runs on the device it is loaded for
        return str(device.index if device.index is not None else 0)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, arg_types=None,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type != "mtia" or kernel_name in self._cpu_triton_kernel_names:
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton,
                                                        arg_types=arg_types, **kwargs)
        assert arg_types is not None and len(call_args) == len(arg_types), (call_args, arg_types)
        # every argument is read into a local now, and the launched lambda
        # captures the locals by value
        self.writeline("{")
        self.writeline(f"    const int32_t mtia_device = {self._device_index_expr(device)};")
        params = []
        for i, (arg, argtype) in enumerate(zip(call_args, arg_types)):
            if isinstance(argtype, str) and "*" in argtype:
                read_only = "true" if argtype.strip().startswith("const ") else "false"
                self.writeline(f"    auto a{i} = openmtia_aoti_tensor_arg({arg}.get(), {read_only}, mtia_device, "
                               f'"{kernel_name}", {i});')
                params.append(f"({argtype})(a{i}.ptr)")
            else:
                self.writeline(f"    auto a{i} = {arg if isinstance(arg, str) else str(arg)};")
                params.append(f"a{i}")
        self.writeline(f'    openmtia_aoti_launch_kernel(mtia_device, "{kernel_name}", [=]() {{ '
                       f"{kernel_name}({', '.join(params)}); }});")
        self.writeline("}")


class TritonPathCppWrapper(CppWrapperCpu):
    """The C++ wrapper slot of mtia's Triton path: its kernels run in Triton's
    interpreter, from Python, so no C++ host code can run them. Asked for one
    (cpp_wrapper=True, or AOTInductor, which always is), it raises saying which
    path deploys, instead of Inductor's "Device mtia not supported"."""

    MESSAGE = ("mtia's Triton path (OPENMTIA_INDUCTOR_BACKEND=triton) runs its kernels in Triton's interpreter, "
               "from Python: it has no C++ wrapper, so torch.compile with cpp_wrapper=True and AOTInductor "
               "packages are not available on it. The C++ path (OPENMTIA_INDUCTOR_BACKEND=cpp, the default) "
               "builds both.")

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        raise RuntimeError(TritonPathCppWrapper.MESSAGE)
