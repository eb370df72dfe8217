"""Exports a small model on mtia and packages it with AOTInductor, for the C++
program (main.cpp): writes model.pt2, input.pt (a CPU tensor) and expected.pt
(the package's output in Python, on mtia) into OUT_DIR.

usage: python examples/aoti_cpp/package.py OUT_DIR
"""
import os
import sys

import torch


class Classifier(torch.nn.Module):
    """An MLP with a layer norm and a softmax: Inductor's kernels, matmuls
    through mtia's shim, layer norm through the dispatcher."""

    def __init__(self, d_in=32, d_hidden=64, classes=10):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.GELU(),
                                       torch.nn.LayerNorm(d_hidden), torch.nn.Linear(d_hidden, classes))

    def forward(self, x):
        return self.net(x).softmax(-1)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = Classifier().eval().to("mtia")
    x = torch.randn(16, 32)
    batch = torch.export.Dim("batch", min=1, max=1024)
    ep = torch.export.export(model, (x.to("mtia"),), dynamic_shapes={"x": {0: batch}})
    path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out_dir, "model.pt2"))
    with torch.no_grad():
        expected = torch._inductor.aoti_load_package(path)(x.to("mtia")).cpu()
        eager = model(x.to("mtia")).cpu()
    torch.testing.assert_close(expected, eager, atol=1e-5, rtol=1e-5)
    torch.save(x, os.path.join(out_dir, "input.pt"))
    torch.save(expected, os.path.join(out_dir, "expected.pt"))
    print(f"package: {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/aoti_cpp")
