"""Triton's backend plugin for mtia (entry point group "triton.backends").

A top-level package, not a part of openmtia: Triton imports every plugin
whenever it is imported, and importing any part of openmtia loads the device.
It imports neither openmtia nor the device; its driver is active only where
mtia is loaded (by torch's autoload or an explicit `import openmtia`).

Active only with OPENMTIA_INDUCTOR_BACKEND=triton: then Triton's driver is the
mtia interpreter driver (driver.py) and kernels compile with NVIDIA's toolchain
that ships with Triton (compiler.py) for Inductor's ahead-of-time compile; they
run in Triton's interpreter over the device memory (openmtia.inductor.triton).
"""
