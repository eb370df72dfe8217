"""Host memory of an mtia process stays bounded like CPU's (issue 22).

Each workload of bench/host_memory.py runs in a fresh process on CPU and on
mtia; mtia's RSS growth must stay within twice CPU's plus 64 MiB. The
signature's first call runs on the real data (no host twins of the
arguments), views at new offsets and new float values are not new
signatures, and the plan cache is bounded in entries and bytes.
"""
import os
import sys

import pytest
import torch

import openmtia

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import host_memory  # noqa: E402


# Under scripts/sanitize.sh the sanitizer's allocator and shadow memory make
# the RSS another process's (malloc_trim has no effect there): the bound is
# checked by the normal run.
UNDER_SANITIZER = any(s in os.environ.get("LD_PRELOAD", "") for s in ("libtsan", "libasan"))


@pytest.mark.skipif(UNDER_SANITIZER, reason="RSS under a sanitizer's allocator is not the process's own")
@pytest.mark.parametrize("workload", ["rows", "transformer", "complex_rows", "lr_schedule", "new_shapes"])
def test_rss_growth_is_bounded_like_cpus(workload):
    cpu = host_memory.in_subprocess(workload, "cpu")
    mtia = host_memory.in_subprocess(workload, "mtia")
    assert mtia <= host_memory.bound(cpu), f"{workload}: mtia grew {mtia:.1f} MiB, CPU {cpu:.1f} MiB"


def test_a_learning_rate_schedule_plans_each_op_once():
    torch.manual_seed(0)
    run = host_memory.lr_schedule("mtia", steps=40)
    run()  # warm-up: each signature's first call
    torch.mtia.synchronize()
    before = openmtia._C._plan_cache_stats()
    run()  # 40 more steps, 40 new learning rates
    torch.mtia.synchronize()
    after = openmtia._C._plan_cache_stats()
    assert after["first_calls"] == before["first_calls"]
    assert after["misses"] == before["misses"]


def test_the_plan_cache_is_bounded_and_evicts_the_least_recently_used():
    openmtia._C._set_plan_cache_limits(64, 1 << 30)
    try:
        x = torch.randn(4, 8, device="mtia")
        hot = lambda: x.exp()  # noqa: E731
        hot()
        for n in range(1, 200):  # 199 new signatures
            torch.randn(n, device="mtia").sin()
            hot()  # used all along: never evicted
        torch.mtia.synchronize()
        s = openmtia._C._plan_cache_stats()
        assert s["entries"] <= 64 and s["evictions"] > 0
        first = s["first_calls"]
        hot()
        torch.mtia.synchronize()
        assert openmtia._C._plan_cache_stats()["first_calls"] == first
        torch.testing.assert_close(hot().cpu(), x.cpu().exp())
        openmtia._C._set_plan_cache_limits(0, 4096)  # bytes bound
        s = openmtia._C._plan_cache_stats()
        assert s["bytes"] <= 4096 and s["max_bytes"] == 4096
    finally:
        openmtia._C._set_plan_cache_limits(0, 0)
    assert openmtia._C._plan_cache_stats()["max_entries"] > 64


@pytest.mark.allocator_state
def test_memory_stats_show_the_host_memory_of_the_plan_cache_and_pinned_memory():
    torch.ones(3, device="mtia").cos()
    stats = torch.mtia.memory_stats()
    plans = openmtia._C._plan_cache_stats()
    assert stats["host.plan_cache.bytes"] == plans["bytes"] > 0
    assert stats["host.plan_cache.entries"] == plans["entries"] > 0
    before = torch.mtia.memory_stats()["host.pinned.active_bytes"]
    pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    stats = torch.mtia.memory_stats()
    assert stats["host.pinned.active_bytes"] >= before + (1 << 20)
    assert stats["host.pinned.allocated_bytes"] >= stats["host.pinned.active_bytes"]
    del pinned
