import os

# a compiled graph that fails to record under mode="reduce-overhead" is an
# error in tests, never a silent eager run (openmtia/inductor/graphs.py)
os.environ["OPENMTIA_GRAPH_CAPTURE_STRICT"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_device_state():
    """Each test starts on mtia:0 with default streams, and leaves no error behind."""
    # torch.mtia.set_stream also makes the stream's device current: device last
    for i in range(torch.mtia.device_count()):
        torch.mtia.set_stream(torch.mtia.default_stream(i))
    torch.mtia.set_device(0)
    yield
    for i in range(torch.mtia.device_count()):
        torch.mtia.synchronize(i)
