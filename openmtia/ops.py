"""Which aten ops have an openmtia kernel on the MTIA dispatch key.

    python -m openmtia.ops            # the list, one op a line
    python -m openmtia.ops --summary  # counts only

An op listed here runs openmtia's own kernel (copies, allocation, views,
fill, ...), or, marked "cpu-kernel", the CPU kernel chosen over a composite
decomposition, or, marked "structured", the CPU structured kernel (run into
the device outputs directly where that is exactly the op), or, marked
"unboxed", an unboxed kernel for the op's plain case (same-shape contiguous
floating operands: a loop over device pointers) that sends every other call
to the structured CPU kernel through the fallback. Every other aten op goes through the boxed fallback,
which runs the CPU kernel on host views of device memory, asynchronously on
the current stream where its Meta kernel allows (set OPENMTIA_DEBUG_FALLBACK=1
to see each call's path).
"""
import argparse

import torch


def native_ops():
    """Sorted names of the aten ops registered for the MTIA key."""
    import openmtia  # noqa: F401  (registers the kernels when autoload is off)

    names = torch._C._dispatch_get_registrations_for_dispatch_key("MTIA")
    return sorted(n if "::" in n else f"aten::{n}" for n in names if n.startswith("aten::") or "::" not in n)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary", action="store_true")
    args = p.parse_args()
    import openmtia

    ops = native_ops()
    structured = set(openmtia._C._structured_ops())
    cpu_kernel = set(openmtia._C._cpu_kernel_over_composite_ops())
    unboxed = set(openmtia._C._unboxed_ops())

    def kind(name):
        if name in unboxed:
            return "  (unboxed)"
        if name in cpu_kernel:
            return "  (cpu-kernel)"
        return "  (structured)" if name in structured else ""
    if not args.summary:
        for name in ops:
            print(f"{name}{kind(name)}")
    n_cpu = sum(n in cpu_kernel for n in ops)
    n_unboxed = sum(n in unboxed for n in ops)
    n_struct = sum(n in structured and n not in cpu_kernel and n not in unboxed for n in ops)
    print(f"# {len(ops) - n_cpu - n_struct - n_unboxed} openmtia kernels, {n_unboxed} unboxed pointwise kernels, "
          f"{n_struct} structured CPU kernels, {n_cpu} CPU kernels chosen over composites; "
          "every other aten op: the fallback")


if __name__ == "__main__":
    main()
