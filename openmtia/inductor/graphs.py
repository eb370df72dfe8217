"""mode="reduce-overhead" on mtia: compiled graphs replayed as MTIAGraphs.

CUDA's implementation (cudagraph trees) is CUDA-only, and Inductor's checks
skip every other device. openmtia gives mtia the equivalent through Inductor's
pluggable `config.cudagraph_policy`: its `wrap_output` sees each compiled graph
(forward, backward, inference; fresh or from the cache) and, when the mode asks
for graphs and the graph runs on one mtia device only, wraps its callable in a
`GraphReplayer`:

- per input signature (sizes, strides, dtypes, the values of symbolic ints and
  the addresses of static inputs), the first call runs the compiled code
  directly (warm-up), the second records it into an MTIAGraph with a private
  memory pool;
- a replay copies the non-static inputs into the graph's static input buffers,
  replays the graph on the current stream, copies mutated inputs back, and
  returns the outputs copied out of the graph's memory (so results held across
  calls are never overwritten by the next replay);
- a new signature (a new batch size, a parameter replaced) records a new graph;
- a graph that cannot be captured (a host sync inside, or an op that must run
  synchronously) runs without one, with a warning; any other error while
  recording is raised. With OPENMTIA_GRAPH_CAPTURE_STRICT=1 (the test suite
  sets it) a capture that fails for any reason is raised too.

`stats` counts warm-ups, recordings, replays and capture failures, so tests can
check that a graph was recorded and replayed rather than silently run eagerly.
"""
import collections
import os
import re
import warnings

import torch
from torch._inductor import config
from torch._inductor.cudagraph_utils import CUDAGraphPolicy
from torch._inductor.output_code import CompiledFxGraph

from .. import _C

_FAILED = object()

# warmups, recordings, replays, capture_failures (since import or reset_stats())
stats = collections.Counter()

# what the runtime and the fallback say when work cannot be captured
_CANNOT_CAPTURE = re.compile(r"not permitted while .* is being captured|cannot be captured into an MTIAGraph")


def strict():
    """True: a failed capture raises instead of running without a graph."""
    return os.environ.get("OPENMTIA_GRAPH_CAPTURE_STRICT", "0") == "1"


def reset_stats():
    stats.clear()


class _Recording:
    def __init__(self, model, inputs, static_idxs, mutated_idxs, device):
        self.dynamic = [
            i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static_idxs
        ]
        self.mutated = [i for i in mutated_idxs if i in self.dynamic]
        self.inputs = list(inputs)
        for i in self.dynamic:
            x = inputs[i]
            self.inputs[i] = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
        self.graph = torch.mtia.MTIAGraph()
        with torch.mtia.graph(self.graph):
            self.outputs = model(list(self.inputs))
        # the host side of a replay in C++ (csrc/compile/graph_replay.cpp)
        self.io = None
        if all(isinstance(o, torch.Tensor) for o in self.outputs):
            buffers = [self.inputs[i] if i in self.dynamic else None for i in range(len(inputs))]
            self.io = _C._ReplayIO(list(inputs), buffers, list(self.outputs), device.index)

    def replay(self, inputs):
        """The replay of a call whose inputs match this recording."""
        if self.io is None or not self.io.copy_in(inputs):
            for i in self.dynamic:
                self.inputs[i].copy_(inputs[i])
        return self.finish(inputs)

    def finish(self, inputs):
        self.graph.replay()
        for i in self.mutated:
            inputs[i].copy_(self.inputs[i])
        inputs.clear()
        out = self.io.copy_out() if self.io is not None else None
        if out is None:
            out = [o.clone() if isinstance(o, torch.Tensor) else o for o in self.outputs]
        return out


class GraphReplayer:
    """The callable of a compiled mtia graph under mode="reduce-overhead"."""

    def __init__(self, model, static_idxs, mutated_idxs, device):
        self.model = model
        self.static_idxs = frozenset(static_idxs)
        self.static_ptrs = {}  # a static input's address at its first call
        self.mutated_idxs = tuple(mutated_idxs)
        self.device = device
        self.warm = set()
        self.recordings = {}
        self.last = None  # the recording of the previous call: tried first

    def _key(self, inputs):
        key = []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                key.append((x.shape, x.stride(), x.dtype, x.device, x.data_ptr() if i in self.static_idxs else None))
            else:
                key.append(x)
        return tuple(key)

    def _demote_moved_static_inputs(self, inputs):
        # Inductor calls a backward graph's saved activations static, as they
        # are under CUDA graph trees, whose forward outputs stay in the graph's
        # pool. Here a replay's outputs are copied out, so they move at every
        # step: an input called static whose address changes is copied in like
        # any other, and the recordings keyed on its old address are dropped.
        moved = set()
        for i in self.static_idxs:
            x = inputs[i]
            if isinstance(x, torch.Tensor) and self.static_ptrs.setdefault(i, x.data_ptr()) != x.data_ptr():
                moved.add(i)
        if moved:
            self.static_idxs = self.static_idxs - moved
            self.recordings.clear()
            self.warm.clear()
            self.last = None

    def __call__(self, inputs):
        last = self.last
        if last is not None and last.io is not None and last.io.copy_in(inputs):
            stats["replays"] += 1
            return last.finish(inputs)  # the common case: same signature as the previous call
        self._demote_moved_static_inputs(inputs)
        key = self._key(inputs)
        recording = self.recordings.get(key)
        if recording is None:
            if key not in self.warm or _C._is_capturing(self.device.index):
                self.warm.add(key)
                stats["warmups"] += 1
                return self.model(inputs)
            try:
                recording = _Recording(self.model, inputs, self.static_idxs, self.mutated_idxs, self.device)
                stats["recordings"] += 1
            except RuntimeError as e:
                if strict() or not _CANNOT_CAPTURE.search(str(e)):
                    raise
                stats["capture_failures"] += 1
                warnings.warn(f"openmtia: running a compiled graph without MTIAGraph replay: capture failed: {e}")
                recording = _FAILED
            self.recordings[key] = recording
        if recording is _FAILED:
            return self.model(inputs)
        self.last = recording
        stats["replays"] += 1
        return recording.replay(inputs)


class MtiaGraphPolicy(CUDAGraphPolicy):
    """Wraps compiled mtia graphs in GraphReplayers under mode="reduce-overhead";
    leaves every other graph to the built-in behaviour."""

    def wrap_output(self, output_code):
        if (
            config.triton.cudagraphs
            and isinstance(output_code, CompiledFxGraph)
            and set(output_code.device_types) == {"mtia"}
            and len(output_code.device_idxs) == 1
            and output_code.current_callable is not None
        ):
            device = torch.device("mtia", next(iter(output_code.device_idxs)))
            output_code.current_callable = GraphReplayer(
                output_code.current_callable,
                output_code.fx_kwargs.get("static_input_idxs") or (),
                output_code.mutated_input_idxs,
                device,
            )
        return output_code


def install():
    if config.cudagraph_policy is None:
        config.cudagraph_policy = MtiaGraphPolicy()
