"""The compiler of Triton's mtia backend: NVIDIA's, for target "mtia" (see __init__)."""
import triton.backends.nvidia.compiler as _nvidia


class MtiaTritonCompiler(_nvidia.CUDABackend):
    @staticmethod
    def supports_target(target):
        return target.backend == "mtia"
