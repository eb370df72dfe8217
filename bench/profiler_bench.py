"""What torch.profiler costs a training step on mtia, against what it costs
CPU PyTorch, in the same run (issue 57).

The main job's step (examples/gpt.py's GPT, 3 layers of width 128, batch 64,
bf16 autocast, AdamW with gradient clipping, the loss read each step) runs
unprofiled and under `torch.profiler.profile` recording (CPU activity, and
MTIA's on mtia), each in a process of its own: CPU PyTorch's as its users
have it (TORCH_DEVICE_BACKEND_AUTOLOAD=0), mtia's with openmtia. The runs
alternate, --repeats times; the table shows medians. Per device: the step's
wall time and the process's CPU time, unprofiled and profiled, and their
ratio (the profiler's overhead). The last row is mtia's overhead over
CPU's: target <= 1.0 (the profiler costs mtia's step no more than CPU's).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from cpu_time_bench import cpu_seconds  # noqa: E402


def serve(device_name, profiled, steps, warmup):
    """One run: prints {"step_s", "cpu_s"} a step as JSON."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpt import GPT, make_data, to_batch

    device = torch.device(device_name)
    torch.manual_seed(0)
    texts, _ = make_data(0, n_train=512, n_held=1)
    x, y = to_batch(texts[:64])
    if device.type == "mtia":
        x, y = x.pin_memory(), y.pin_memory()
    model = GPT(width=128, layers=3).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def step():
        xd, yd = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(xd)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), yd.view(-1),
                                                 ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.MTIA] if device.type == "mtia" else [])
    prof = profile(activities=activities) if profiled else None
    if prof:
        prof.start()
    for _ in range(3):  # (the profiler's own first-step costs, outside the timed steps; as many unprofiled)
        step()
    c0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(steps):
        step()
    t1, c1 = time.perf_counter(), cpu_seconds()
    if prof:
        prof.stop()
    print(json.dumps({"step_s": (t1 - t0) / steps, "cpu_s": (c1 - c0) / steps}))


def run(device, profiled, steps, warmup):
    env = dict(os.environ)
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU PyTorch as its users have it
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", device, str(int(profiled)),
           "--steps", str(steps), "--warmup", str(warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--quick", action="store_true", help="one run each, fewer steps (a smoke run)")
    p.add_argument("--serve", nargs=2, metavar=("DEVICE", "PROFILED"), help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=8, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve(args.serve[0], args.serve[1] == "1", args.steps, args.warmup)
    repeats, steps, warmup = (1, 4, 3) if args.quick else (args.repeats, args.steps, args.warmup)
    flags = sorted(set(open("/proc/cpuinfo").read().split()) & {"avx512_bf16", "amx_bf16", "avx512bw", "avx2"})
    print(f"torch.profiler's cost on the main job's step, profiled / unprofiled (medians of {repeats}, "
          f"{steps} steps); host: {os.cpu_count()} cores, {' '.join(flags)}")
    got = {(d, prof): [] for d in ("cpu", "mtia") for prof in (False, True)}
    for _ in range(repeats):
        for key in got:
            got[key].append(run(key[0], key[1], steps, warmup))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("step_s", "cpu_s")} for k, v in got.items()}
    print("| device | step ms | profiled | overhead | CPU-ms a step | profiled | overhead |")
    print("|---|---|---|---|---|---|---|")
    over = {}
    for d in ("cpu", "mtia"):
        plain, prof = med[(d, False)], med[(d, True)]
        over[d] = (prof["step_s"] / plain["step_s"], prof["cpu_s"] / plain["cpu_s"])
        print(f"| {d} | {1e3 * plain['step_s']:.2f} | {1e3 * prof['step_s']:.2f} | {over[d][0]:.2f} "
              f"| {1e3 * plain['cpu_s']:.2f} | {1e3 * prof['cpu_s']:.2f} | {over[d][1]:.2f} |")
    print(f"| mtia's overhead / CPU's (target <= 1.0) | | | {over['mtia'][0] / over['cpu'][0]:.2f} | | "
          f"| {over['mtia'][1] / over['cpu'][1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
