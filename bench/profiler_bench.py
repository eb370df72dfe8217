"""What torch.profiler costs a training step on mtia, against what it costs
CPU PyTorch, in the same run (issue 57).

The main job's step (examples/gpt.py's GPT, 3 layers of width 128, batch 64,
bf16 autocast, AdamW with gradient clipping, the loss read each step) runs
in rounds, each a block of --steps steps unprofiled then a block under a new
`torch.profiler.profile` recording (CPU activity, and MTIA's on mtia; its
first steps untimed), in a process per device: CPU PyTorch's as its users
have it (TORCH_DEVICE_BACKEND_AUTOLOAD=0), mtia's with openmtia; --repeats
processes each. A round's overhead is its profiled block's time over its
unprofiled one's: the two run side by side in one process, because a
process's step time on a 2-core VM can differ from the next one's (and
change within a process) by more than the profiler costs (mtia's GPT step
21 or 31 ms, CPU's 45 or 51). The table shows medians over all rounds: per
device, the step's wall time and the process's CPU time, unprofiled and
profiled, and the overhead. The last row is mtia's overhead over CPU's:
target <= 1.0 (the profiler costs mtia's step no more than CPU's).
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


def serve(device_name, rounds_count, steps, warmup):
    """One process: prints its rounds, each {"plain", "profiled"}: {"step_s", "cpu_s"} a step, as JSON."""
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

    def block():
        c0, t0 = cpu_seconds(), time.perf_counter()
        for _ in range(steps):
            step()
        t1, c1 = time.perf_counter(), cpu_seconds()
        return {"step_s": (t1 - t0) / steps, "cpu_s": (c1 - c0) / steps}

    rounds = []
    for _ in range(rounds_count):
        for _ in range(3):  # (as many untimed steps as the profiled block's)
            step()
        plain = block()
        with profile(activities=activities):
            for _ in range(3):  # (the profiler's own first-step costs, outside the timed steps)
                step()
            profiled = block()
        rounds.append({"plain": plain, "profiled": profiled})
    print(json.dumps(rounds))


def run(device, rounds, steps, warmup):
    env = dict(os.environ)
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU PyTorch as its users have it
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", device, str(rounds),
           "--steps", str(steps), "--warmup", str(warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="processes per device")
    p.add_argument("--rounds", type=int, default=6, help="rounds (unprofiled, profiled) per process")
    p.add_argument("--steps", type=int, default=15, help="timed steps per block")
    p.add_argument("--quick", action="store_true", help="one run each, fewer steps (a smoke run)")
    p.add_argument("--serve", nargs=2, metavar=("DEVICE", "ROUNDS"), help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=8, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]), args.steps, args.warmup)
    repeats, rounds, steps, warmup = (1, 1, 3, 3) if args.quick else (args.repeats, args.rounds, args.steps, args.warmup)
    flags = sorted(set(open("/proc/cpuinfo").read().split()) & {"avx512_bf16", "amx_bf16", "avx512bw", "avx2"})
    print(f"torch.profiler's cost on the main job's step, profiled / unprofiled (medians of {repeats} processes x "
          f"{rounds} rounds of {steps} steps a block); host: {os.cpu_count()} cores, {' '.join(flags)}")
    got = {"cpu": [], "mtia": []}
    for _ in range(repeats):
        for d in got:
            got[d] += run(d, rounds, steps, warmup)
    print("| device | step ms | profiled | overhead | CPU-ms a step | profiled | overhead |")
    print("|---|---|---|---|---|---|---|")
    over = {}
    for d, rs in got.items():
        med = {(k, m): statistics.median(r[k][m] for r in rs) for k in ("plain", "profiled") for m in ("step_s", "cpu_s")}
        over[d] = tuple(statistics.median(r["profiled"][m] / r["plain"][m] for r in rs) for m in ("step_s", "cpu_s"))
        print(f"| {d} | {1e3 * med['plain', 'step_s']:.2f} | {1e3 * med['profiled', 'step_s']:.2f} | {over[d][0]:.3f} "
              f"| {1e3 * med['plain', 'cpu_s']:.2f} | {1e3 * med['profiled', 'cpu_s']:.2f} | {over[d][1]:.3f} |")
    print(f"| mtia's overhead / CPU's (target <= 1.0) | | | {over['mtia'][0] / over['cpu'][0]:.3f} | | "
          f"| {over['mtia'][1] / over['cpu'][1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
