"""OPENMTIA_STRICT_MEMORY=1: host threads cannot touch device memory; the
torch side still works (it stages through host buffers), with CPU's results."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch


def run(code, driver="emulated", timeout=300):
    env = dict(os.environ, OPENMTIA_STRICT_MEMORY="1", OPENMTIA_DRIVER=driver)
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_ctypes_read_of_a_device_tensors_memory_fails_naming_device_and_address():
    r = run("""
        import ctypes, sys, torch
        x = torch.arange(1000, dtype=torch.float32, device="mtia:1")
        assert x.sum().item() == 499500.0   # the device's own work runs
        print(hex(x.data_ptr() + 40), flush=True)
        ctypes.c_float.from_address(x.data_ptr() + 40).value
        print("read succeeded", flush=True)
    """)
    address = r.stdout.split()[0]
    assert "read succeeded" not in r.stdout
    assert r.returncode == -11, (r.returncode, r.stderr[-2000:])  # SIGSEGV
    assert "openmtia: host access to device memory: a host thread touched address " + address in r.stderr, r.stderr
    assert "inside mtia:1's allocation" in r.stderr
    assert 'File "<string>", line 6' in r.stderr, r.stderr  # (Python's faulthandler, chained: where it happened)


def test_a_host_write_right_after_device_work_fails_too():
    r = run("""
        import ctypes, torch
        x = torch.zeros(16, device="mtia")
        y = x + 1          # device work on x's memory ...
        torch.mtia.synchronize()
        ctypes.c_float.from_address(y.data_ptr()).value = 5.0   # ... then the host
        print("write succeeded", flush=True)
    """)
    assert "write succeeded" not in r.stdout
    assert r.returncode == -11 and "host access to device memory" in r.stderr, r.stderr[-2000:]


def test_the_torch_side_works_on_memory_the_host_cannot_touch_with_cpus_results():
    r = run("""
        import torch
        torch.manual_seed(0)
        assert torch.mtia.get_device_properties(0)["host_addressable"] is False
        a = torch.randn(64, 48)
        b = torch.randn(48, 32)
        i = torch.tensor([3, 1, 7])
        ma, mb, mi = a.to("mtia"), b.to("mtia"), i.to("mtia")
        checks = {
            # the asynchronous path, in tasks
            "matmul": ((ma @ mb).cpu(), a @ b),
            "softplus": (torch.nn.functional.softplus(ma).cpu(), torch.nn.functional.softplus(a)),
            # the synchronous fallback (data-dependent shapes, values at the call): staged
            "nonzero": (torch.nonzero(ma > 0.5).cpu(), torch.nonzero(a > 0.5)),
            "masked_select": (ma[ma > 1].cpu(), a[a > 1]),
            "unique": (torch.unique(mi.repeat(3)).cpu(), torch.unique(i.repeat(3))),
            "index_select": (ma.index_select(0, mi).cpu(), a.index_select(0, i)),
            "item": (torch.tensor(ma.sum().item()), torch.tensor(a.sum().item())),
            "sort": (torch.sort(ma, dim=1).values.cpu(), torch.sort(a, dim=1).values),
            "topk": (torch.topk(ma, 3).values.cpu(), torch.topk(a, 3).values),
            "linalg_solve": (torch.linalg.solve(ma[:8, :8] + 8 * torch.eye(8, device="mtia"), ma[:8, :2]).cpu(),
                             torch.linalg.solve(a[:8, :8] + 8 * torch.eye(8), a[:8, :2])),
        }
        # in place and out= through the fallback: the writes go back to the device
        mc, c = ma.clone(), a.clone()
        torch.nonzero(mc > 0, out=(mo := torch.empty(0, 2, dtype=torch.long, device="mtia")))
        checks["nonzero_out"] = (mo.cpu(), torch.nonzero(c > 0))
        mc.cumsum_(1); c.cumsum_(1)
        checks["cumsum_"] = (mc.cpu(), c)
        # a training step
        torch.manual_seed(1)
        net = torch.nn.Sequential(torch.nn.Linear(48, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        mnet = torch.nn.Sequential(torch.nn.Linear(48, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("mtia")
        mnet.load_state_dict(net.state_dict())
        for model, x in ((net, a), (mnet, ma)):
            opt = torch.optim.AdamW(model.parameters(), lr=0.01)
            for _ in range(3):
                loss = model(x).square().mean()
                opt.zero_grad(); loss.backward(); opt.step()
        checks["train"] = (mnet[0].weight.detach().cpu(), net[0].weight.detach())
        print(repr(torch.ones(2, device="mtia")))
        for name, (got, want) in checks.items():
            torch.testing.assert_close(got, want, msg=name)
        print("ok", flush=True)
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_a_driver_without_a_strict_mode_leaves_mtia_unavailable_saying_why():
    r = run("""
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import torch
        print(torch.mtia.is_available(), torch.mtia.device_count())
        print([str(x.message) for x in w])
    """, driver="reference")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("False 0"), r.stdout
    assert "has no strict memory mode (OPENMTIA_STRICT_MEMORY=1)" in r.stdout
