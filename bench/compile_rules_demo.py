"""Shows MTIA's Inductor rules on openmtia: native_layer_norm kept as one device
kernel (forward and backward) in the generated code, the fusion guardrail
`max_fusion_unique_io_buffers`, and, on the Triton path (a subprocess with
OPENMTIA_INDUCTOR_BACKEND=triton), combo kernels with `combo_kernel_max_num_args`
and a user-written Triton kernel on mtia tensors."""
import os
import subprocess
import sys

import torch
from torch._inductor import config, metrics
from torch._inductor.utils import run_and_get_code


def eleven_outputs(x0, *xs):
    return [torch.relu(x0 * xi + 1) for xi in xs]


def kernel_count(fn, args, **patch):
    torch._dynamo.reset()
    metrics.reset()
    with config.patch(fx_graph_cache=False, **patch):
        torch.compile(fn)(*args)
    return metrics.generated_kernel_count


def cpp_path():
    ln = torch.nn.LayerNorm(64).to("mtia")
    x = torch.randn(8, 64, device="mtia", requires_grad=True)

    def step(x):
        y = torch.compile(lambda x: ln(x).relu().sum())(x)
        y.backward()
        return y

    _, (fwd, bwd) = run_and_get_code(step, x)
    print("LayerNorm model, generated code (C++ path):")
    for name, code in (("forward", fwd), ("backward", bwd)):
        for line in code.splitlines():
            if "torch.ops.aten.native_layer_norm" in line and "=" in line and "assert" not in line:
                print(f"  {name}: {line.strip()}")
    args = [torch.randn(64, device="mtia") for _ in range(12)]
    print("11 outputs relu(x0 * xi + 1), generated kernels (C++ path): "
          f"no limit {kernel_count(eleven_outputs, args)}, "
          f"max_fusion_unique_io_buffers=4 {kernel_count(eleven_outputs, args, max_fusion_unique_io_buffers=4)}")


TRITON_PATH = """
import torch, triton, triton.language as tl
from torch._inductor import config, metrics
import importlib.util, sys
spec = importlib.util.spec_from_file_location("demo", sys.argv[1]); demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)

def many(*xs):
    return [x.sin() + i for i, x in enumerate(xs)]

xs = [torch.randn(32 + i, device="mtia") for i in range(8)]
print("8 independent sin kernels, generated kernels (Triton path): "
      f"combo_kernels off {demo.kernel_count(many, xs, combo_kernels=False)}, "
      f"on {demo.kernel_count(many, xs, combo_kernels=True)}, "
      f"on with combo_kernel_max_num_args=4 {demo.kernel_count(many, xs, combo_kernels=True, combo_kernel_max_num_args=4)}")
args = [torch.randn(64, device="mtia") for _ in range(12)]
print("11 outputs relu(x0 * xi + 1), generated kernels (Triton path): "
      f"no limit {demo.kernel_count(demo.eleven_outputs, args)}, "
      f"max_fusion_unique_io_buffers=4 {demo.kernel_count(demo.eleven_outputs, args, max_fusion_unique_io_buffers=4)}")

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

x, y = torch.randn(1000, device="mtia"), torch.randn(1000, device="mtia")
out = torch.empty_like(x)
add_kernel[(triton.cdiv(1000, 256),)](x, y, out, 1000, BLOCK=256)
print(f"user @triton.jit add on mtia tensors: output on {out.device}, "
      f"max |out - (x + y)| = {(out.cpu() - (x.cpu() + y.cpu())).abs().max().item()}")
"""


def main():
    cpp_path()
    env = dict(os.environ, OPENMTIA_INDUCTOR_BACKEND="triton")
    r = subprocess.run([sys.executable, "-c", TRITON_PATH, os.path.abspath(__file__)], env=env,
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode:
        print(r.stderr[-3000:])
    return r.returncode


if __name__ == "__main__":
    raise SystemExit(main())
