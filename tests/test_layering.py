"""tools/check_layers.py: no include runs up a layer (csrc/README.md)."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "tools", "check_layers.py")


def run_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=60)


def test_tree_includes_only_downward():
    r = run_check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every include runs downward" in r.stdout


def _copy_tree(tmp_path):
    for top in ("runtime", "csrc"):
        shutil.copytree(os.path.join(ROOT, top), tmp_path / top)
    return tmp_path


def test_upward_include_fails(tmp_path):
    root = _copy_tree(tmp_path)
    f = root / "csrc" / "runtime" / "hooks.cpp"
    f.write_text('#include "aten/fallback/plan_cache.h"\n' + f.read_text())
    r = run_check(str(root))
    assert r.returncode == 1
    assert ("csrc/runtime/hooks.cpp:1: includes aten/fallback/plan_cache.h (csrc/aten/, layer 2) "
            "from csrc/runtime/ (layer 1): up a layer") in r.stdout


def test_peer_include_and_torch_in_runtime_fail(tmp_path):
    root = _copy_tree(tmp_path)
    f = root / "csrc" / "distributed" / "work.cpp"
    f.write_text('#include "compile/kernels.h"\n' + f.read_text())
    g = root / "runtime" / "drivers" / "emulated" / "engine.h"
    g.write_text(g.read_text() + '\n#include <ATen/core/Tensor.h>\n')
    r = run_check(str(root))
    assert r.returncode == 1
    assert "csrc/distributed/work.cpp:1: includes compile/kernels.h (csrc/compile/, layer 3) " \
           "from csrc/distributed/ (layer 3): a peer layer" in r.stdout
    assert "runtime/drivers/emulated/engine.h" in r.stdout and "ATen/core/Tensor.h (torch, layer 1)" in r.stdout
    assert "2 include(s) run up or across a layer" in r.stdout
