"""openmtia is loaded by `import torch` (torch.backends entry point) and configured by env."""
import os
import subprocess
import sys

import pytest


def run(code, **env):
    full_env = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_plain_import_torch_gives_a_working_mtia():
    out = run("import sys, torch; x = torch.randn(64, 32, device='mtia'); "
              "print(torch.mtia.is_available(), tuple((x.t() @ x).cpu().shape), 'openmtia' in sys.modules)")
    assert out == "True (32, 32) True"


def test_explicit_import_is_idempotent():
    out = run("import torch, openmtia, importlib; import openmtia as again; "
              "importlib.import_module('openmtia'); print(again is openmtia, torch.mtia.device_count(), "
              "torch.ones(2, device='mtia').sum().item())")
    assert out == "True 2 2.0"


def test_importing_openmtia_before_torch():
    out = run("import openmtia, torch; print(torch.ones(2, device='mtia:1').sum().item())")
    assert out == "2.0"


def test_native_ops_command():
    r = subprocess.run([sys.executable, "-m", "openmtia.ops"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for op in ("aten::copy_", "aten::empty.memory_format", "aten::_local_scalar_dense", "aten::resize_"):
        assert op in lines
    assert "aten::convolution  (cpu-kernel)" in lines
    assert "aten::add.Tensor  (unboxed)" in lines
    assert lines[-1].startswith("# ")


def test_explicit_import_without_autoload():
    out = run("import torch, openmtia; print(torch.mtia.is_available(), torch.zeros(3, device='mtia').device)",
              TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out == "True mtia:0"


def test_device_count_and_memory_from_env():
    out = run("import torch; print(torch.mtia.device_count(), torch.mtia.get_device_properties(2)['total_memory'])",
              OPENMTIA_DEVICE_COUNT="3", OPENMTIA_DEVICE_MEMORY="512M")
    assert out == f"3 {512 << 20}"


def test_zero_devices_means_not_available():
    out = run("import torch; print(torch.mtia.is_available(), torch.mtia.device_count())", OPENMTIA_DEVICE_COUNT="0")
    assert out == "False 0"


def test_small_device_memory_gives_oom():
    out = run("import torch\n"
              "try:\n    torch.empty(2 << 20, dtype=torch.uint8, device='mtia')\n"
              "except torch.OutOfMemoryError as e:\n    print('oom')\n"
              "print(torch.empty(1 << 20, dtype=torch.uint8, device='mtia').numel())",
              OPENMTIA_DEVICE_MEMORY="1.5M")
    assert out == f"oom\n{1 << 20}"


def test_alloc_conf_caps_the_process_share_and_rejects_bad_entries():
    out = run("import torch\n"
              "try:\n    torch.empty(600 << 20, dtype=torch.uint8, device='mtia')\n"
              "except torch.OutOfMemoryError as e:\n    print('oom', 'memory fraction' in str(e))\n"
              "print(torch.empty(300 << 20, dtype=torch.uint8, device='mtia').numel() == 300 << 20)",
              OPENMTIA_DEVICE_MEMORY="1G", OPENMTIA_ALLOC_CONF="per_process_memory_fraction:0.5,max_split_size_mb:64")
    assert out == "oom True\nTrue"
    out = run("import torch\n"
              "try:\n    torch.empty(1, device='mtia')\n"
              "except RuntimeError as e:\n    print(str(e).splitlines()[0])",
              OPENMTIA_ALLOC_CONF="max_split_size_mb:lots")
    assert "OPENMTIA_ALLOC_CONF: bad entry 'max_split_size_mb:lots'" in out


def _unbuilt_checkout(tmp_path):
    """A copy of the checkout's layout whose openmtia/ has no extension: what
    the repository's root looks like when openmtia is installed as a package
    (not in place)."""
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copy(os.path.join(root, "setup.py"), tmp_path / "setup.py")
    (tmp_path / "csrc").mkdir()
    shutil.copytree(os.path.join(root, "openmtia"), tmp_path / "openmtia",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return tmp_path


def test_import_torch_from_an_unbuilt_checkout_still_works(tmp_path):
    cwd = _unbuilt_checkout(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import torch, openmtia; print(torch.ones(2).sum().item(), "
                        "torch.mtia.is_available(), openmtia.__file__)"],
                       capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["2.0", "False"]
    assert r.stdout.split()[2] == str(cwd / "openmtia" / "__init__.py")  # the checkout's, as Python found it
    assert "RuntimeWarning: openmtia: you are importing openmtia from its source directory, " \
           f"{cwd}, which is not built (openmtia/_C is missing)" in r.stderr
    assert "pip install --no-build-isolation -e ." in r.stderr


def test_explicit_import_from_an_unbuilt_checkout_raises_naming_it(tmp_path):
    cwd = _unbuilt_checkout(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import openmtia"], capture_output=True, text=True, cwd=cwd,
                       timeout=120)
    assert r.returncode == 1
    assert "ImportError: openmtia: you are importing openmtia from its source directory" in r.stderr


def test_a_built_checkout_imports_without_a_warning():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c",
                        "import torch; print(torch.ones(2, device='mtia').sum().item())"],
                       capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "2.0", r.stderr


def test_autoload_off_keeps_mtia_out_even_when_triton_is_imported():
    """Triton imports every backend plugin at `import triton` (PyTorch's test
    helpers import it): mtia's plugin must not load the device."""
    out = run("import sys, torch, triton; from triton.backends import backends; "
              "print('openmtia' in sys.modules, torch.mtia.is_available(), torch.accelerator.current_accelerator(), "
              "'mtia' in backends)", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out == "False False None True"


def test_with_autoload_on_tritons_mtia_backend_drives_the_device():
    out = run("import torch, triton; from triton.runtime import driver; "
              "print(type(driver.active).__name__, driver.active.get_active_torch_device())",
              OPENMTIA_INDUCTOR_BACKEND="triton")
    assert out == "MtiaInterpreterDriver mtia:0"
