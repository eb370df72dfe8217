import os

# a compiled graph that fails to record under mode="reduce-overhead" is an
# error in tests, never a silent eager run (openmtia/inductor/graphs.py)
os.environ["OPENMTIA_GRAPH_CAPTURE_STRICT"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_async: the test depends on a driver that runs tasks while the host goes on "
        "(OMTIA_DEVICE_ASYNC: it holds a stream, or checks that a call returns before its task ran). "
        "The synchronous reference driver runs every other test: -m 'not needs_async'.")


def driver_is_async():
    """Whether the loaded driver runs tasks asynchronously (the emulator does, the C reference driver does not)."""
    return torch.mtia.get_device_properties(0)["asynchronous"]


@pytest.fixture(autouse=True)
def _needs_async(request):
    """A needs_async test on a synchronous driver fails at once, saying why
    (a task that holds the stream would block the launching thread itself)."""
    if request.node.get_closest_marker("needs_async") and not driver_is_async():
        pytest.fail("this test needs an asynchronous driver (OMTIA_DEVICE_ASYNC); the loaded one runs tasks "
                    "synchronously: deselect it with -m 'not needs_async'", pytrace=False)


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
