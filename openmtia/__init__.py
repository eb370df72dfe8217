"""openmtia: an open implementation of PyTorch's MTIA device.

Loaded by torch's device-backend autoload (entry point group ``torch.backends``)
at the end of ``import torch``, so ``torch.device("mtia")``, ``torch.mtia`` and
``torch.accelerator`` work without importing this package. Importing it
explicitly is harmless: Python loads the extension once.
"""


def _autoload():
    """Entry point called by torch's backend autoload: importing did the work.

    Defined before `import torch`: when openmtia is imported first, that import
    runs torch's autoload, which looks this function up on the partly
    initialized package.
    """


import os as _os  # noqa: E402

#: For C++ programs: CMAKE_PREFIX_PATH for find_package(openmtia) (beside
#: torch.utils.cmake_prefix_path): libopenmtia.so, the mtia backend without
#: Python, and its headers (examples/aoti_cpp).
cmake_prefix_path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "share", "cmake")

from ._checkout import refuse_unbuilt_checkout, unbuilt_checkout_message  # noqa: E402  (no torch)

_UNBUILT = unbuilt_checkout_message()
if _UNBUILT is None:
    from ._device import device_memory_info  # noqa: E402  loads _C: registers mtia with torch

    __all__ = ["cmake_prefix_path", "device_memory_info"]
else:
    # Python found the source checkout's openmtia/ (the current directory
    # first on sys.path), which has no extension: as numpy and torch do, say
    # so, and leave `import torch` working (mtia unavailable).
    refuse_unbuilt_checkout(_UNBUILT)
