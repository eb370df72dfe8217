"""The device driver openmtia._C loads (OPENMTIA_DRIVER; runtime/README.md):
the emulator by default, the C reference driver by name, any library by path,
and a clear warning (mtia unavailable, import still working) when none loads."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import openmtia


def run(code, **env):
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=300)


def test_the_emulator_is_the_default_driver():
    # (in a process of its own: this one may run on another driver, OPENMTIA_DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENMTIA_DRIVER", "OPENMTIA_STRICT_MEMORY")}
    code = ("import torch, openmtia; p = torch.mtia.get_device_properties(0); "
            "print(openmtia._C._driver_name(), repr(openmtia._C._driver_error()), p['name'], p['host_addressable'], "
            "p['asynchronous'])")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "emulated '' openmtia emulated device True True"


WORK = """
import torch, openmtia
print(openmtia._C._driver_name(), torch.mtia.device_count())
print(torch.mtia.get_device_properties(0)["name"].replace(" ", "_"))
torch.manual_seed(0)
a = torch.randn(64, 32)
b = torch.randn(32, 16)
got = (torch.relu(a.to("mtia") @ b.to("mtia")) + 1).sum(0).cpu()
want = (torch.relu(a @ b) + 1).sum(0)
print(torch.equal(got, want))
s = torch.mtia.Stream()
with torch.mtia.stream(s):
    y = a.to("mtia") * 2
s.synchronize()
print(torch.equal(y.cpu(), a * 2))
"""


def test_the_reference_driver_by_name_gives_cpus_results():
    r = run(WORK, OPENMTIA_DRIVER="reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["reference", "2", "openmtia_reference_device_0", "True", "True"], r.stdout


def test_a_driver_by_path():
    path = os.path.join(os.path.dirname(openmtia.__file__), "libopenmtia_driver_reference.so")
    r = run(WORK, OPENMTIA_DRIVER=path, OPENMTIA_DEVICE_COUNT="3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["reference", "3", "openmtia_reference_device_0", "True", "True"], r.stdout


def test_a_task_error_under_the_reference_driver_raises_at_the_sync():
    r = run("""
        import torch
        x = torch.zeros(4, device="mtia")
        x[torch.tensor([7], device="mtia")] = 1.0  # out of bounds: found by the device
        try:
            torch.mtia.synchronize()
        except RuntimeError as e:
            print("raised:", "asynchronous task" in str(e), "out of bounds" in str(e))
        print(torch.ones(2, device="mtia").sum().item())  # still usable
        """, OPENMTIA_DRIVER="reference")
    assert r.returncode == 0, r.stderr
    assert "raised: True True" in r.stdout, r.stdout + r.stderr
    assert r.stdout.strip().endswith("2.0")


UNAVAILABLE = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import torch
    import openmtia
print("warned:", [str(x.message) for x in w if "mtia is unavailable" in str(x.message)])
print("available:", torch.mtia.is_available(), torch.mtia.device_count())
try:
    torch.ones(1, device="mtia")
except RuntimeError as e:
    print("error:", e)
"""


def check_unavailable(r, why):
    assert r.returncode == 0, r.stderr  # not a crash
    assert "available: False 0" in r.stdout, r.stdout
    warned = next(line for line in r.stdout.splitlines() if line.startswith("warned:"))
    assert why in warned, r.stdout
    error = next(line for line in r.stdout.splitlines() if line.startswith("error:"))
    assert why in error, r.stdout


def test_no_such_driver_leaves_mtia_unavailable_with_the_reason():
    r = run(UNAVAILABLE, OPENMTIA_DRIVER="nonesuch")
    check_unavailable(r, "cannot load the mtia driver 'nonesuch'")


def test_a_library_without_the_entry_point():
    lib = next(p for p in ("/lib/x86_64-linux-gnu/libgcc_s.so.1", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
                           "/lib64/libgcc_s.so.1") if os.path.exists(p))
    r = run(UNAVAILABLE, OPENMTIA_DRIVER=lib)
    check_unavailable(r, "has no entry point openmtia_driver_get")


FAKE = r"""
#include "openmtia/driver.h"
#include <string.h>
static OmtiaStatus lastError(OmtiaErrorInfo* e) {
  e->code = OMTIA_ERROR_INTERNAL;
  e->message = "no hardware found";
  return OMTIA_SUCCESS;
}
static OmtiaStatus initialize(const OmtiaInitArgs* a) { (void)a; return OMTIA_ERROR_INTERNAL; }
static OmtiaDriver table;
OMTIA_DRIVER_EXPORT const OmtiaDriver* openmtia_driver_get(uint32_t major) {
  memset(&table, 0, sizeof table);
  table.struct_size = sizeof table;
  table.abi_major = MAJOR;
  table.name = "fake";
  table.get_last_error = lastError;
  table.initialize = initialize;
  return major == MAJOR ? &table : 0;
}
"""


@pytest.fixture(scope="module")
def fake_drivers(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed to build the fake drivers (the setup installs gcc)")
    d = tmp_path_factory.mktemp("drivers")
    src = d / "fake.c"
    src.write_text(FAKE)
    include = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "include")
    out = {}
    for name, major in (("other_major", 2), ("failing", 1)):
        lib = d / f"{name}.so"
        subprocess.run([cc, "-std=c99", "-shared", "-fPIC", f"-DMAJOR={major}", "-I", include, str(src), "-o",
                        str(lib)], check=True)
        out[name] = str(lib)
    return out


def test_a_driver_of_another_major_version(fake_drivers):
    r = run(UNAVAILABLE, OPENMTIA_DRIVER=fake_drivers["other_major"])
    header = open(os.path.join(os.path.dirname(__file__), "..", "runtime", "include", "openmtia", "driver.h")).read()
    abi = ".".join(re.search(rf"#define OMTIA_DRIVER_ABI_{part} (\d+)", header).group(1) for part in ("MAJOR", "MINOR"))
    check_unavailable(r, f"does not implement driver ABI {abi}")  # (the ABI openmtia is built against)


def test_a_driver_that_fails_to_start(fake_drivers):
    r = run(UNAVAILABLE, OPENMTIA_DRIVER=fake_drivers["failing"])
    check_unavailable(r, "failed to start: no hardware found")
