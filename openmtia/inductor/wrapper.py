"""What every mtia wrapper (the generated host code) does differently from the
stock one: buffers are allocated on their own mtia device through openmtia's
allocator, and no closed module is imported."""
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen


class MtiaAllocation:
    """Mixin: `empty_strided_mtia(size, stride, dtype, device_index)`."""

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == "mtia" and device.index is not None:
            # the generated code may set no current device: allocate on the buffer's
            call, end = f"{name} = empty_strided_mtia(", f", {dtype})"
            assert line.startswith(call) and end in line, line
            line = line.replace(end, f", {dtype}, {device.index})", 1)
        return line


def wrapper_classes(mixin, imports):
    """(top-level wrapper class, subgraph wrapper class) with `mixin`'s
    definitions; `imports` is added to the generated module's imports."""

    class MtiaSubgraphWrapperCodegen(mixin, MtiaAllocation, SubgraphPythonWrapperCodegen):
        pass

    class MtiaWrapperCodegen(mixin, MtiaAllocation, PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return MtiaSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return MtiaWrapperCodegen()

        def write_header(self):
            super().write_header()
            self.imports.splice("from openmtia._C import _empty_strided as openmtia_empty_strided\n" + imports,
                                strip=True)
            self.header.writeline("empty_strided_mtia = openmtia_empty_strided")

    return MtiaWrapperCodegen, MtiaSubgraphWrapperCodegen
