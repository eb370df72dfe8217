"""A main job under torchrun, as the recovery tests run it (issue 58): 2 ranks
on this host, checkpoints every 10 steps into tmp_path/NAME, the losses (and
metric) in tmp_path/NAME.json, its chart as NAME.png in its working folder
(tmp_path: a path with no folder is one)."""
import json
import os
import subprocess
import sys


def torchrun_job(script, tmp_path, name, script_args, torchrun_args=(), **env):
    """Runs `script` under torchrun; returns its output and its record. torch
    2.13's restarts read the first run's addresses from the store torchrun
    shares (pytorch#135712): TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as
    docs/faults.md says."""
    record = tmp_path / f"{name}.json"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          *torchrun_args, script, *script_args, "--losses-json", str(record),
                          "--png", f"{name}.png", "--checkpoint", str(tmp_path / name),
                          "--checkpoint-every", "10"],
                         capture_output=True, text=True, timeout=900, cwd=str(tmp_path),
                         env={**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                              "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **env})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(record.read_text())


RESTART = ("--max-restarts", "1", "--monitor-interval", "0.5")
