"""torch.distributed on mtia: the "openmtia" c10d backend, DDP, FSDP2, failures.

Each test runs its ranks as processes (tests/dist_workers.py), one mtia device
per rank, talking over loopback.
"""
import datetime
import os
import re
import socket
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import dist_workers  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What rank 0 raises when rank 1 died: the collective's signature exchange
# (or Gloo, with the check off) sees the closed socket, and the collective's
# task fails, raised at the next sync (a device error: torch.AcceleratorError).
PEER_DIED = (r"((Accelerator|Runtime)Error: openmtia: asynchronous task 'c10d[_:]\w+' failed on mtia:0 stream \d+: "
             r"|DistBackendError: ).*(rank 1 closed its connection: that rank has likely exited|"
             r"Connection closed by peer|Connection reset by peer|Timed out)")


def spawn(fn, *args, world=2, timeout=180):
    ctx = mp.spawn(fn, args=(world, free_port(), *args), nprocs=world, join=False)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{fn.__name__} did not finish within {timeout} s")


def test_backend_is_registered_for_mtia():
    assert dist.Backend.default_device_backend_map["mtia"] == "openmtia"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert "mtia" in dist.Backend.backend_capability["openmtia"]
    assert dist.Backend("openmtia") == "openmtia"


@pytest.mark.parametrize("form", ["none", "device_id", "device_map", "name"])
def test_init_process_group_picks_openmtia(form):
    spawn(dist_workers.init_forms, form)


def test_collectives():
    spawn(dist_workers.collectives)


@pytest.mark.needs_async
def test_a_group_of_one_rank_runs_its_collectives_without_gloo():
    spawn(dist_workers.one_rank, world=1)


def test_both_ranks_sending_first_do_not_deadlock():
    spawn(dist_workers.sends_first)


@pytest.mark.needs_async
def test_collective_stream_semantics():
    spawn(dist_workers.stream_semantics)


@pytest.mark.needs_async
def test_a_freed_input_is_not_reused_before_the_collective_reads_it():
    spawn(dist_workers.freed_input_is_not_reused)


def test_errors_and_cross_rank_mismatches():
    spawn(dist_workers.errors)


def test_dead_rank_makes_the_others_raise(tmp_path):
    result = tmp_path / "result"
    spawn(dist_workers.dead_rank, str(result), timeout=120)
    elapsed, usable, outcome = result.read_text().splitlines()
    assert re.match(PEER_DIED, outcome), outcome
    assert float(elapsed) < 15, f"took {elapsed} s (timeout 10 s): {outcome}"
    assert usable == "True"


@pytest.mark.needs_async
def test_a_rank_whose_collective_hangs_makes_the_other_raise_within_the_timeout(tmp_path):
    # rank 1 stops responding (alive, connected: a hang fault on its
    # collective), as a rank whose device hangs
    spawn(dist_workers.hung_rank, str(tmp_path), timeout=120)
    ranks = {r: (tmp_path / f"rank{r}").read_text().split("\n") for r in (0, 1)}
    elapsed, usable, outcome, _ = ranks[0][:4]
    assert re.search(r"rank 1 did not call the collective within the group's timeout \(5000 ms\)", outcome), outcome
    assert 4.5 < float(elapsed) < 10, (elapsed, outcome)  # the group's timeout: 5 s
    assert usable == "True"
    elapsed, usable, outcome, released = ranks[1][:4]
    assert outcome == "DistBackendError: openmtia: all_reduce did not complete within 2000 ms", outcome
    assert 1.9 < float(elapsed) < 4, (elapsed, outcome)  # its wait's own timeout
    assert re.search(r"'c10d:all_reduce' hung mtia:1 stream \d+ until the fault was released", released), released
    assert usable == "True"


@pytest.mark.needs_async
@pytest.mark.parametrize("checksums", ["1", "0"])
def test_a_corrupted_payload_is_caught_by_the_result_checksum_on_every_rank(tmp_path, checksums):
    # rank 1 receives one flipped bit in each of four collectives (a corrupt
    # fault): an all_reduce in one exchange, one through Gloo, a broadcast,
    # an all_gather_into_tensor
    spawn(dist_workers.corrupt_payload, str(tmp_path), checksums, timeout=120)
    names = ["all_reduce", "all_reduce", "broadcast", "all_gather_into_tensor"]
    results = {r: torch.load(tmp_path / f"results{r}.pt") for r in (0, 1)}
    for r in (0, 1):
        *outcomes, after = (tmp_path / f"rank{r}").read_text().splitlines()
        assert after == "True", f"rank {r}: a collective after the corruption differs from CPU's"
        for call, (name, outcome) in enumerate(zip(names, outcomes)):
            if checksums == "1":
                assert re.fullmatch(
                    rf"AcceleratorError: openmtia: asynchronous task 'c10d_wait' failed on mtia:{r} stream \d+: "
                    rf"openmtia: corrupted payload: the result of {name} \(call \d+ of this "
                    r"process group\) differs across ranks: rank 1 received other data than rank 0's \(result "
                    r"checksums differ\): the data was damaged in transit", outcome), (r, outcome)
                assert results[r][call] is None
            else:  # undetected: rank 1 trains on another result, silently
                assert outcome == "no error", (r, outcome)
    if checksums == "0":
        for call in range(len(names)):
            a, b = results[0][call], results[1][call]
            assert not torch.equal(a, b), names[call]
            assert (a != b).sum() <= 1 or torch.isnan(b).any() or torch.isnan(a).any(), names[call]


@pytest.mark.parametrize("env, message", [
    ({"OPENMTIA_C10D_CHECKSUM": "yes"}, "OPENMTIA_C10D_CHECKSUM='yes': expected 0 or 1"),
    ({"OPENMTIA_C10D_CHECKSUM": "1", "OPENMTIA_C10D_CHECK": "0"},
     "OPENMTIA_C10D_CHECKSUM=1 needs the collectives' check, which OPENMTIA_C10D_CHECK=0 turns off"),
])
def test_a_bad_checksum_setting_raises_at_the_groups_creation(monkeypatch, env, message):
    import openmtia.distributed

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=re.escape(message)):
        openmtia.distributed._create_backend(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))


@pytest.mark.parametrize("variant", ["plain", "gradient_as_bucket_view", "find_unused_parameters", "no_sync",
                                     "static_graph", "comm_hook"])
def test_ddp_equals_one_process(variant):
    spawn(dist_workers.ddp, variant)


def test_fsdp2_dtensor_and_checkpoint(tmp_path):
    spawn(dist_workers.fsdp2, str(tmp_path / "ckpt"))

