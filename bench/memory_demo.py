"""The memory management features of mtia, shown in one run:

1. a warm training loop (MLP, AdamW): per step, the device allocations
   (num_device_alloc), segments and reserved bytes stay flat while the
   allocation count grows: freed blocks are reused;
2. out of memory: torch.OutOfMemoryError's text, the observer's call, and an
   allocation that succeeds afterwards;
3. the memory history rendered by PyTorch's own visualizer
   (torch.cuda._memory_viz.trace_plot and segment_plot) into HTML files.
"""
import argparse
import os
import tempfile

import torch
from torch.cuda import _memory_viz


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=tempfile.gettempdir(), help="directory for the HTML files")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to("mtia")
    opt = torch.optim.AdamW(model.parameters())
    x, t = torch.randn(32, 64, device="mtia"), torch.randint(0, 10, (32,), device="mtia")
    torch.mtia.record_memory_history(enabled="all", stacks="python")
    print("1. warm training loop")
    for step in range(8):
        loss = torch.nn.functional.cross_entropy(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.mtia.synchronize()
        s = torch.mtia.memory_stats()
        print(f"   step {step}: num_device_alloc {s['num_device_alloc']}, segments {s['segment.all.allocated']}, "
              f"reserved {s['reserved_bytes.all.current']}, allocations so far {s['allocation.all.allocated']}")

    print("2. out of memory")
    calls = []
    torch.mtia.attach_out_of_memory_observer(lambda *a: calls.append(a))
    try:
        torch.empty(12 * 2**30, dtype=torch.uint8, device="mtia")
    except torch.OutOfMemoryError as e:
        print(f"   torch.OutOfMemoryError: {e}")
    print(f"   observer called with (device, requested, allocated, device free): {calls}")
    after = torch.empty(2**20, dtype=torch.uint8, device="mtia")
    print(f"   then a 1 MiB allocation: {after.numel()} bytes at {after.data_ptr():#x}")

    print("3. memory history in PyTorch's visualizer")
    snapshot = torch.mtia.snapshot()
    for name, render in (("trace", _memory_viz.trace_plot), ("segments", _memory_viz.segment_plot)):
        path = os.path.join(args.out, f"openmtia_{name}.html")
        with open(path, "w") as f:
            f.write(render(snapshot))
        print(f"   {path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
