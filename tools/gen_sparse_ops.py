"""Generates sparse_ops.h from the installed torch's native_functions.yaml:
the sparse COO kernels mtia gets on its SparseMTIA dispatch key
(csrc/aten/sparse/). (Compressed layouts cannot exist on mtia with torch
2.13: docs/eager.md.)

- shared: the ops whose CPU and CUDA sparse kernels are one function
  (`SparseCPU, SparseCUDA: fn`). Such a kernel is device-generic: it works on
  the sparse tensor's members (indices, values) through other ops, which on
  mtia are mtia's strided kernels. mtia runs that same kernel, reached on the
  CPU key's entry (the function is the same).
- host: the ops whose CPU kernel is CPU's alone (coalesce, sparse-dense add
  and matmul, index_select, softmax, ...): mtia runs the CPU kernel over host
  views of the members (the fallback's synchronous path).
Ops with no CPU sparse kernel stay unregistered: the dispatcher raises
NotImplementedError naming the op and the SparseMTIA backend, as CPU raises
for SparseCPU.

usage: gen_sparse_ops.py NATIVE_FUNCTIONS_YAML OUTPUT_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import native_yaml  # noqa: E402  (beside this file)
from gen_structured_ops import parse  # noqa: E402

# CPU sparse kernels that mean nothing for a device tensor (pinned host memory)
SKIP = {"is_pinned", "_pin_memory"}


def sparse_ops(entries):
    """(shared, host) op names (name.overload) of the CPU kernels on
    SparseCPU, split by whether SparseCUDA has the same function."""
    shared, host = [], []
    for e in entries:
        cpu = e["dispatch"].get("SparseCPU")
        if cpu is None or e["name"] in SKIP:
            continue
        name = e["name"] + ("." + e["overload"] if e["overload"] else "")
        (shared if e["dispatch"].get("SparseCUDA") == cpu else host).append(name)
    return shared, host


def array(name, items):
    body = "".join(f'    "{i}",\n' for i in items)
    return f"inline constexpr const char* {name}[] = {{\n{body}}};\n"


def main(yaml_path, out_dir):
    entries = parse(native_yaml.load(yaml_path))
    shared, host = sparse_ops(entries)
    text = ("// Sparse kernels for mtia (tools/gen_sparse_ops.py). Generated; do not edit.\n#pragma once\n\n"
            "namespace openmtia {\n\n" + array("kSparseSharedOps", shared) + array("kSparseHostOps", host)
            + "\n}  // namespace openmtia\n")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "sparse_ops.h")
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
