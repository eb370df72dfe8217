"""Recommendation models on mtia (issue 42): TorchRec and FBGEMM.

Point 1, the dependencies: scripts/setup.sh installs torchrec and FBGEMM's
CPU build, pinned as a pair that loads with torch 2.13; openmtia does not
require them.
"""
import importlib.metadata
import os
import re

import torch

PINS = {"torchrec": "1.8.0", "fbgemm-gpu-cpu": "1.8.0"}  # as scripts/setup.sh installs them


def test_torchrec_and_fbgemm_cpu_are_the_pinned_pair_beside_the_cpu_torch():
    for name, version in PINS.items():
        assert importlib.metadata.version(name) == version, name
    assert torch.__version__ == "2.13.0+cpu"
    try:
        importlib.metadata.version("fbgemm-gpu")  # torchrec's declared requirement: FBGEMM's CUDA build
        raise AssertionError("fbgemm-gpu (the CUDA build) is installed beside fbgemm-gpu-cpu")
    except importlib.metadata.PackageNotFoundError:
        pass
    setup = open(os.path.join(os.path.dirname(__file__), "..", "scripts", "setup.sh")).read()
    for name, version in PINS.items():
        assert re.search(rf"\b{name}=={re.escape(version)}\b", setup), name


def test_openmtia_does_not_require_them():
    requires = importlib.metadata.requires("openmtia") or []
    assert not [r for r in requires if re.match(r"(torchrec|fbgemm)", r)], requires


def test_fbgemm_ops_load_and_run_on_mtia_like_cpu():
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    import torchrec  # noqa: F401

    lengths = torch.tensor([3, 0, 2, 5])
    expected = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
    got = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths.to("mtia"))
    assert got.device.type == "mtia"
    torch.testing.assert_close(got.cpu(), expected)
