"""The C++ deployment (issue 41, point 3): examples/aoti_cpp/build.sh builds
main.cpp against libtorch and libopenmtia (find_package(openmtia)) and
packages a model on mtia with Python; the program then loads the package
with torch::inductor::AOTIModelPackageLoader and runs it on mtia, in a
process without Python. Its output is compared with Python's run of the same
package and with the model on CPU.
"""
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "aoti_cpp"))
from package import Classifier  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("aoti_cpp")
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    subprocess.run(["bash", os.path.join(ROOT, "examples", "aoti_cpp", "build.sh")], env=env, check=True,
                   capture_output=True, timeout=900)
    return out


def run(built, *args, env=None):
    """The program, in an environment without Python's variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    clean.update(env or {})
    return subprocess.run([str(built / "aoti_mtia"), *map(str, args)], env=clean, capture_output=True, text=True,
                          timeout=300)


def test_the_program_links_no_python(built):
    ldd = subprocess.run(["ldd", str(built / "aoti_mtia")], capture_output=True, text=True, check=True).stdout
    libs = {line.split()[0] for line in ldd.splitlines() if line.strip()}
    assert {"libopenmtia.so", "libopenmtia_aoti.so", "libtorch_cpu.so"} <= libs, libs
    assert not any("python" in lib for lib in libs), libs  # neither libpython nor libtorch_python


@pytest.mark.parametrize("device_index", [0, 1])
def test_cpp_output_equals_python_and_cpu(built, device_index):
    out = built / f"out{device_index}.pt"
    r = run(built, built / "model.pt2", built / "input.pt", out, device_index, 3)
    assert r.returncode == 0, r.stderr
    assert f"on mtia:{device_index}" in r.stdout and "ms per run (3 runs)" in r.stdout
    got = torch.load(out)
    torch.testing.assert_close(got, torch.load(built / "expected.pt"))  # Python's run of the package
    torch.manual_seed(0)
    model = Classifier().eval()  # package.py's model, on CPU
    with torch.no_grad():
        torch.testing.assert_close(got, model(torch.load(built / "input.pt")), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 7, 300])
def test_other_batch_sizes_within_the_exported_range(built, tmp_path, batch):
    # the package's batch is Dim(min=1, max=1024): one request at a time too
    x = torch.randn(batch, 32)
    torch.save(x, tmp_path / "x.pt")
    r = run(built, built / "model.pt2", tmp_path / "x.pt", tmp_path / "y.pt")
    assert r.returncode == 0, r.stderr
    torch.manual_seed(0)
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "y.pt"), Classifier().eval()(x), atol=1e-5, rtol=1e-5)


def test_errors_are_reported_not_crashes(built, tmp_path):
    # a truncated package
    data = (built / "model.pt2").read_bytes()
    (tmp_path / "cut.pt2").write_bytes(data[: len(data) // 2])
    r = run(built, tmp_path / "cut.pt2", built / "input.pt", tmp_path / "y.pt")
    assert r.returncode == 1 and "aoti_mtia: " in r.stderr and "Failed to initialize zip archive" in r.stderr, r.stderr
    # inputs of the wrong shape and dtype: the model's checks name them
    torch.save(torch.randn(4, 31), tmp_path / "bad.pt")
    r = run(built, built / "model.pt2", tmp_path / "bad.pt", tmp_path / "y.pt")
    assert r.returncode == 1 and "aoti_mtia: " in r.stderr and "unmatched dim value at 1" in r.stderr, r.stderr
    torch.save(torch.randn(4, 32, dtype=torch.float64), tmp_path / "f64.pt")
    r = run(built, built / "model.pt2", tmp_path / "f64.pt", tmp_path / "y.pt")
    assert r.returncode == 1 and "unmatched dtype" in r.stderr, r.stderr
    # no driver
    r = run(built, built / "model.pt2", built / "input.pt", tmp_path / "y.pt",
            env={"OPENMTIA_DRIVER": str(tmp_path / "missing_driver.so")})
    assert r.returncode == 1 and "mtia is unavailable" in r.stderr and "missing_driver.so" in r.stderr, r.stderr
