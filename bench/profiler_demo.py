"""What torch.profiler shows of mtia: device time per op and a row per stream.

Profiles a few transformer-layer train steps on mtia (one matmul on a side
stream too), prints key_averages() sorted by device time, and the chrome
trace's device rows with their first kernels. The trace is written to
bench/results/mtia_trace.json (open it in chrome://tracing or Perfetto).
"""
import collections
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

layer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True).to("mtia")
opt = torch.optim.AdamW(layer.parameters())
x = torch.randn(8, 64, 128, device="mtia")
side = torch.mtia.Stream()


def step():
    loss = layer(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.mtia.stream(side):
        torch.mm(x[0], x[0].t())


step()
torch.mtia.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA], profile_memory=True) as prof:
    for _ in range(3):
        step()
    torch.mtia.synchronize()

print(prof.key_averages().table(sort_by="device_time_total", row_limit=12, max_name_column_width=32))
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mtia_trace.json")
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
prof.export_chrome_trace(path)
events = json.load(open(path))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
rows = collections.defaultdict(list)
for e in events:
    if e.get("cat") == "mtia_ccp_events":
        rows[(e["pid"], e["tid"])].append(e)
print(f"chrome trace {path}: {len(rows)} mtia stream rows")
for key, kernels in sorted(rows.items()):
    first = ", ".join(f"{k['name']} {k['dur']:.0f}us" for k in kernels[:4])
    print(f"  row {names.get(key, key)!r}: {len(kernels)} kernels ({first}, ...)")
flows = sum(1 for e in events if e.get("cat") == "ac2g")
mem = sum(1 for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 19)
print(f"  {flows} flow events link host ops to their kernels; {mem} mtia memory events")
