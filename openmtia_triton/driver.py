"""The driver of Triton's mtia backend: the current device and stream are
mtia's; kernels are interpreted (see __init__)."""
import os

from triton.backends.compiler import GPUTarget as _GPUTarget
from triton.backends.driver import DriverBase as _DriverBase


class MtiaInterpreterDriver(_DriverBase):
    @classmethod
    def is_active(cls):
        if os.environ.get("OPENMTIA_INDUCTOR_BACKEND") != "triton":
            return False
        import torch

        return torch.mtia.is_available()

    def __init__(self):
        import torch

        super().__init__()
        self.get_current_device = torch.mtia.current_device
        self.set_current_device = torch.mtia.set_device
        self.get_current_stream = lambda device=None: torch.mtia.current_stream(device).stream_id

    def map_python_to_cpp_type(self, ty):
        raise NotImplementedError("mtia Triton kernels run in Triton's interpreter")

    def get_current_target(self):
        return _GPUTarget("mtia", 80, 32)

    def get_active_torch_device(self):
        import torch

        return torch.device("mtia", torch.mtia.current_device())

    def get_device_interface(self):
        import torch

        return torch.mtia

    def get_benchmarker(self):
        from triton.testing import do_bench

        return do_bench
