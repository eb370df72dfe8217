import os

# a compiled graph that fails to record under mode="reduce-overhead" is an
# error in tests, never a silent eager run (openmtia/inductor/graphs.py)
os.environ["OPENMTIA_GRAPH_CAPTURE_STRICT"] = "1"

import gc  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import unittest  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--order", default="file",
        help="the order tests run in: 'file' (as written), 'reverse', or 'shuffle:SEED' (a seeded "
             "shuffle): tests must pass in any order (tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    order = config.getoption("--order")
    if order == "file":
        return
    if order == "reverse":
        items.reverse()
    elif order.startswith("shuffle:"):
        random.Random(order.split(":", 1)[1]).shuffle(items)
    else:
        raise pytest.UsageError(f"--order: expected 'file', 'reverse' or 'shuffle:SEED', got {order!r}")


def _test_fn_of_the_stack():
    """torch.testing._internal.common_utils.extract_test_fn without its
    inspect.stack(): the same search (the innermost frame whose ``self`` is the
    unittest.TestCase running the test), by walking the frames. inspect.stack()
    reads every frame's source file and resolves its module by scanning
    sys.modules: under pytest (a deep stack, thousands of modules) that is
    65 ms for each OpInfo sample_inputs()/error_inputs() call, most of
    test_errors_at_the_call's 3 minutes."""
    frame = sys._getframe(1)
    while frame is not None:
        self_val = frame.f_locals.get("self")
        if isinstance(self_val, unittest.TestCase):
            *_, cls_name, test_name = self_val.id().rsplit(".", 2)
            if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                return getattr(self_val, test_name).__func__
        frame = frame.f_back
    return None


def pytest_collection_finish(session):
    # only where a test module imported PyTorch's test internals (importing
    # them here would change global flags for every other test)
    common_utils = sys.modules.get("torch.testing._internal.common_utils")
    if common_utils is not None:
        common_utils.extract_test_fn = _test_fn_of_the_stack


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_async: the test depends on a driver that runs tasks while the host goes on "
        "(OMTIA_DEVICE_ASYNC: it holds a stream, or checks that a call returns before its task ran). "
        "The synchronous reference driver runs every other test: -m 'not needs_async'.")
    config.addinivalue_line(
        "markers",
        "allocator_state: the test asserts on the device allocator's state (stats, memory history, "
        "empty_cache, out of memory): it starts from a settled device (settle_device()).")


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


def settle_device():
    """Frees what earlier tests left behind before a test reads the
    allocator's state, as PyTorch's own CUDA memory checks do (gc.collect(),
    then synchronize): tensors held by garbage cycles (a test's frame and a
    ``pytest.raises(...) as info`` reference each other until the collector
    runs, which it may do in the middle of a later test, between two reads of
    the stats), and tasks still queued or finished but not yet destroyed
    (what they captured is released by the host's synchronize), and pinned
    blocks whose frees waited for copies (released by empty_host_cache once
    the copies' streams passed them; they count as active until then)."""
    gc.collect()
    for i in range(torch.mtia.device_count()):
        torch.mtia.synchronize(i)
    torch.accelerator.empty_host_cache()


@pytest.fixture(autouse=True)
def _settled_device(request):
    if request.node.get_closest_marker("allocator_state"):
        settle_device()
    yield


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
