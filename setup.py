"""Builds openmtia with CMake + ninja against the installed torch.

Install with `pip install --no-build-isolation .` (or `-e .`): build isolation
would make pip fetch another torch. torch itself stays pinned to 2.13.0.
"""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


# What ships beside _C: {path in the package: path in the CMake build}. The
# device drivers _C loads (OPENMTIA_DRIVER); the library and headers that code
# from Inductor's C++ wrapper (cpp_wrapper, AOTInductor) compiles against.
SHIPPED = {
    "libopenmtia_driver_emulated.so": "runtime/libopenmtia_driver_emulated.so",
    "libopenmtia_driver_reference.so": "runtime/libopenmtia_driver_reference.so",
    "libopenmtia.so": "libopenmtia.so",
    "libopenmtia_aoti.so": "libopenmtia_aoti.so",
    "include/openmtia/openmtia.h": str(ROOT / "csrc" / "runtime" / "init.h"),
    "include/openmtia/aoti_mtia.h": str(ROOT / "csrc" / "aoti" / "aoti_mtia.h"),
    "include/openmtia/c_shim_mtia.h": "generated/aoti/c_shim_mtia.h",
    "share/cmake/openmtia/openmtiaConfig.cmake": str(ROOT / "cmake" / "openmtiaConfig.cmake"),
}


class CMakeBuild(build_ext):
    @staticmethod
    def _test_module():
        """OPENMTIA_TEST_MODULE=1 (scripts/test.sh): also openmtia._C_test."""
        return os.environ.get("OPENMTIA_TEST_MODULE", "0") == "1"

    def _beside_c(self):
        """What ships beside _C: the drivers, and the test module when asked."""
        names = list(SHIPPED)
        if self._test_module():
            names.append(Path(self.get_ext_filename("openmtia._C_test")).name)
        return names

    def _pairs(self):
        """(built, in-place) paths of what ships beside _C, in both places."""
        built = Path(self.build_lib) / "openmtia"
        return [(str(built / d), str(ROOT / "openmtia" / d)) for d in self._beside_c()]

    def get_outputs(self):
        return super().get_outputs() + [b for b, _ in self._pairs() if not self.inplace]

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield from self._pairs()

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        for built, inplace in self._pairs():
            Path(inplace).parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(built, inplace, level=self.verbose)
        if not self._test_module():  # no stale test module from an earlier build
            stale = ROOT / "openmtia" / Path(self.get_ext_filename("openmtia._C_test")).name
            if stale.exists():
                stale.unlink()

    def build_extension(self, ext):
        import torch.utils

        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(os.environ.get("OPENMTIA_BUILD_DIR", ROOT / "build" / "cmake"))
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DOPENMTIA_BUILD_TESTS={os.environ.get('OPENMTIA_BUILD_TESTS', 'OFF')}",
            f"-DOPENMTIA_BUILD_TEST_MODULE={'ON' if self._test_module() else 'OFF'}",
        ]
        subprocess.check_call(cfg)
        jobs = os.environ.get("OPENMTIA_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        built = next(build_dir.glob("_C.*.so"))
        out.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(out))
        for name, built_path in SHIPPED.items():
            (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(build_dir / built_path), str(out.parent / name))
        test_module = out.parent / Path(self.get_ext_filename("openmtia._C_test")).name
        if self._test_module():
            self.copy_file(str(next(build_dir.glob("_C_test.*.so"))), str(test_module))
        elif test_module.exists():
            test_module.unlink()

setup(
    name="openmtia",
    version="0.1.0",
    description="An open MTIA backend for PyTorch, with an emulated device runtime",
    packages=["openmtia", "openmtia.inductor", "openmtia_triton"],
    ext_modules=[CMakeExtension("openmtia._C")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["torch==2.13.0"],
    python_requires=">=3.10",
    entry_points={
        "torch.backends": ["openmtia = openmtia:_autoload"],
        # Triton's plugin for mtia (active with OPENMTIA_INDUCTOR_BACKEND=triton): a
        # package of its own, so that Triton's discovery (any `import triton`)
        # does not import openmtia, which loads the device
        "triton.backends": ["mtia = openmtia_triton"],
    },
)
