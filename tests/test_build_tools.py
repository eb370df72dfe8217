"""The build's code generator (tools/gen_structured_ops.py) needs no PyYAML:
tools/native_yaml.py reads torch's native_functions.yaml and tags.yaml as
torchgen's own reader (PyYAML plus line numbers) does."""
import os
import subprocess
import sys

import pytest
import torch
import torchgen

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_structured_ops  # noqa: E402
import native_yaml  # noqa: E402

NATIVE = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")


@pytest.mark.parametrize("name", ["native_functions.yaml", "tags.yaml"])
def test_reads_torchs_files_as_torchgen_does(name):
    import yaml  # PyYAML: in the test environment (transformers needs it), not in the build's
    from torchgen.gen import LineLoader

    path = os.path.join(NATIVE, name)
    with open(path) as f:
        expected = yaml.load(f, Loader=LineLoader)
    got = native_yaml.load(path)
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected):
        assert a == b


def test_the_meta_kernels_equal_torchgens_own_parse():
    from torchgen.gen import parse_native_yaml  # imports PyYAML

    path = os.path.join(NATIVE, "native_functions.yaml")
    ours = gen_structured_ops.meta_kernel_entries(
        gen_structured_ops.native_functions(native_yaml.load(path), path), INCLUDE)
    theirs = gen_structured_ops.meta_kernel_entries(
        parse_native_yaml(path, os.path.join(NATIVE, "tags.yaml")).native_functions, INCLUDE)
    assert ours == theirs and len(ours[0]) > 300


def test_the_generator_runs_without_pyyaml(tmp_path):
    # as in a fresh virtualenv holding only torch: `import yaml` fails
    code = ("import runpy, sys; sys.modules['yaml'] = None; "
            "sys.argv = [sys.argv[1]] + sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "tools", "gen_structured_ops.py"),
                        os.path.join(NATIVE, "native_functions.yaml"), INCLUDE, str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "385 structured ops" in r.stdout and "385 C++ meta functions" in r.stdout, r.stdout
    for name in ("structured_ops.h", "prebuilt_includes.h", "prebuilt_kernels.h", "meta_kernels.cpp"):
        assert (tmp_path / name).stat().st_size > 0


@pytest.mark.parametrize("text,message", [
    ("- func: a\n  x: &anchor b\n", "unsupported YAML '&anchor b'"),
    ("- func: a\n  x: {k: v}\n", "unsupported YAML '{k: v}'"),
    ("- func: a\n  x: >\n    folded\n", "unsupported YAML '>'"),
    ("- func: a\n  x: \"esc\\\"aped\"\n", "unsupported quoted scalar"),
    ("- func: a\n      over: indented\n", "unexpected indentation"),
    ("- func: a\n  func: b\n", "duplicate key 'func'"),
])
def test_refuses_yaml_it_does_not_read(tmp_path, text, message):
    p = tmp_path / "f.yaml"
    p.write_text(text)
    with pytest.raises(native_yaml.YamlSubsetError, match=message.replace("'", ".").replace("{", ".").replace("}", ".")):
        native_yaml.load(str(p))
