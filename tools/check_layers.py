"""Fails on an include that runs up a layer (DEVELOPERS: "No include runs up
a layer").

The layers, bottom up:
  0  runtime/              the device runtime: no torch, nothing of csrc/
  1  csrc/runtime/         glue between torch's device interfaces and the driver client
  2  csrc/aten/            kernels on the MTIA key (fallback/, low_precision/ within)
  3  csrc/compile/, csrc/distributed/, csrc/profiler/, csrc/aoti/   (peers: none includes another)
  4  csrc/python/          the Python modules, which bind every layer

A file may include its own layer and the layers below it. Includes are read
as written ("folder/file.h" from csrc/, "openmtia/..." from runtime/include/,
<torch/...>, <ATen/...>, <c10/...>, <pybind11/...>, <Python.h>). Generated
headers (structured_ops.h, prebuilt_*.h, in the build tree) belong to
csrc/aten/; c_shim_mtia.h to csrc/aoti/.

usage: python tools/check_layers.py [ROOT]   (exit 1 and one line per upward
include, naming the file, the line, the include and both layers)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_EXT = (".h", ".hpp", ".c", ".cc", ".cpp", ".inc")

# layer of a csrc/ folder, by its first path component
CSRC_LAYERS = {"runtime": 1, "aten": 2, "compile": 3, "distributed": 3, "profiler": 3, "aoti": 3, "python": 4}
GENERATED = {"structured_ops.h": "aten", "prebuilt_includes.h": "aten", "prebuilt_kernels.h": "aten",
             "c_shim_mtia.h": "aoti"}
TORCH_PREFIXES = ("torch/", "ATen/", "c10/", "caffe2/", "pybind11/", "kineto/", "libkineto")
PYTHON_HEADERS = ("Python.h",)


def layer_of_file(rel):
    """(layer number, name) of a source file, rel to the root; None outside."""
    parts = rel.split("/")
    if parts[0] == "runtime":
        return 0, "runtime/"
    if parts[0] == "csrc" and len(parts) > 2 and parts[1] in CSRC_LAYERS:
        return CSRC_LAYERS[parts[1]], "csrc/" + parts[1] + "/"
    return None


def layer_of_include(quote, path, rel_dir, root):
    """(layer number, name) of what an include names, or None if it names a
    system header or a file of the same folder."""
    if quote == "<":
        if path.startswith(TORCH_PREFIXES) or path in PYTHON_HEADERS:
            return 1, "torch"
        return None
    if path.startswith("openmtia/"):
        return 0, "runtime/"
    if path in GENERATED:
        return CSRC_LAYERS[GENERATED[path]], "csrc/" + GENERATED[path] + "/"
    first = path.split("/")[0]
    if "/" in path and first in CSRC_LAYERS and os.path.exists(os.path.join(root, "csrc", path)):
        return CSRC_LAYERS[first], "csrc/" + first + "/"
    if os.path.exists(os.path.join(root, rel_dir, path)):  # beside the file
        return layer_of_file(os.path.normpath(os.path.join(rel_dir, path)).replace(os.sep, "/"))
    return None


def check(root):
    errors = []
    for top in ("runtime", "csrc"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                own = layer_of_file(rel)
                if own is None:
                    continue
                for lineno, line in enumerate(open(full, errors="replace"), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = layer_of_include(m.group(1), m.group(2), os.path.dirname(rel), root)
                    if target is None:
                        continue
                    upward = target[0] > own[0]
                    sideways = target[0] == own[0] and target[1] != own[1] and target[1] != "torch"
                    if upward or sideways:
                        errors.append(f"{rel}:{lineno}: includes {m.group(2)} ({target[1]}, layer {target[0]}) "
                                      f"from {own[1]} (layer {own[0]}): "
                                      f"{'up a layer' if upward else 'a peer layer'}")
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    errors = check(os.path.abspath(root))
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} include(s) run up or across a layer")
        return 1
    print("check_layers: every include runs downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
