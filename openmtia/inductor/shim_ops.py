"""The aten ops mtia's AOTInductor C shim has beyond torchgen's
`inductor_fallback_ops`: the ops Inductor keeps whole on mtia (MTIA's rule,
openmtia/inductor/__init__.py), which it decomposes on every other device and
so never lists. Without a shim, the C++ wrapper calls them through torch's
proxy executor (a boxed call from the package's JSON, with a warning at
compile time); with one, as a direct C call like the listed ops.

Read by tools/gen_aoti_shim.py at build time (by path: no imports here) and by
openmtia/inductor/cpp_wrapper.py at compile time. The values are torchgen's
version information (none: the first version).
"""
EXTRA_SHIM_OPS = {
    "aten.native_layer_norm.default": {},
    "aten.native_layer_norm_backward.default": {},
}
