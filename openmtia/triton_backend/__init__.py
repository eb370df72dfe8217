"""Triton's backend plugin for mtia (entry point group "triton.backends").

Active only with OPENMTIA_INDUCTOR_BACKEND=triton: then Triton's driver is the
mtia interpreter driver (driver.py) and kernels compile with NVIDIA's toolchain
that ships with Triton (compiler.py) for Inductor's ahead-of-time compile; they
run in Triton's interpreter over the device memory (openmtia.inductor.triton).
"""
