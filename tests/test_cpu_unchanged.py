"""openmtia installed changes nothing for a program that does not use mtia:
the same CPU workload (torchrun with init_process_group() and no backend,
collectives, DDP, torch.compile, the profiler, save/load) gives the same
output with openmtia autoloaded and with TORCH_DEVICE_BACKEND_AUTOLOAD=0."""
import json
import os
import subprocess
import sys

CPU_WORKLOAD = r"""
import io, json, os, sys
import torch, torch.distributed as dist

dist.init_process_group()  # no backend: torch picks one per device type
rank = dist.get_rank()
out = {"openmtia loaded": "openmtia" in sys.modules, "backend": str(dist.get_backend())}

t = torch.arange(4.0) * (rank + 1)
dist.all_reduce(t)
gathered = [torch.zeros(2) for _ in range(2)]
dist.all_gather(gathered, torch.full((2,), float(rank)))
b = torch.full((3,), float(rank))
dist.broadcast(b, src=1)
out["collectives"] = [t.tolist(), [g.tolist() for g in gathered], b.tolist()]

sub = dist.new_group([0, 1])  # a group made like the default one
s = torch.ones(2) * (rank + 1)
dist.all_reduce(s, group=sub)
out["new_group"] = s.tolist()

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
losses = []
for _ in range(3):
    x = torch.randn(4, 8, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
out["ddp losses"] = losses
out["ddp weights"] = [p.detach().sum().item() for p in model.parameters()]

f = torch.compile(lambda a: torch.nn.functional.gelu(a) * a.sin() + 1)
out["compiled"] = f(torch.linspace(-2, 2, 7)).tolist()

with torch.profiler.profile() as prof:
    torch.mm(torch.ones(16, 16), torch.ones(16, 16)).sum()
events = prof.key_averages()
out["profiler"] = sorted((e.key, e.count) for e in events)
out["profiler device time"] = sum(e.device_time_total for e in events)

buf = io.BytesIO()
torch.save({"w": model.module[0].weight.detach(), "step": 3}, buf)
buf.seek(0)
loaded = torch.load(buf, weights_only=True)
out["save/load"] = [loaded["w"].device.type, loaded["w"].sum().item(), loaded["step"]]

dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print("RESULT", json.dumps(out))
"""


def run_cpu_workload(tmp_path, autoload):
    script = tmp_path / "cpu_workload.py"
    script.write_text(CPU_WORKLOAD)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, OMP_NUM_THREADS="1",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor-{autoload}"))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_cpu_program_under_torchrun_gives_the_same_results_with_openmtia_loaded(tmp_path):
    with_openmtia = run_cpu_workload(tmp_path, "1")
    without = run_cpu_workload(tmp_path, "0")
    assert with_openmtia.pop("openmtia loaded") is True
    assert without.pop("openmtia loaded") is False
    assert without["collectives"] == [[0.0, 3.0, 6.0, 9.0], [[0.0, 0.0], [1.0, 1.0]], [1.0, 1.0, 1.0]]
    assert with_openmtia == without
