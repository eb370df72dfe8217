"""Hugging Face models through AOTInductor on mtia (issue 41, point 5): the
models of test_transformers.py, exported on mtia (their logits, eval mode),
packaged, loaded and run there; equal to the same model in eager mode on CPU.
"""
import copy

import pytest
import torch

from test_transformers import MODELS, batch


class Logits(torch.nn.Module):
    """The model's logits: what an inference server returns."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, **kwargs):
        return self.model(input_ids=input_ids, **kwargs).logits


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5"])
def test_exported_model_runs_through_aoti_like_cpu(name, tmp_path):
    torch.manual_seed(0)
    model = Logits(MODELS[name]()).eval()
    data = batch(name)
    ids = data["input_ids"]
    # t5 is an encoder-decoder: the labels are its decoder's input here
    kwargs = {"decoder_input_ids": data["labels"]} if name == "t5" else {"attention_mask": data["attention_mask"]}
    with torch.no_grad():
        ref = model(ids, **kwargs)
    on_mtia = {k: v.to("mtia") for k, v in kwargs.items()}
    ep = torch.export.export(copy.deepcopy(model).to("mtia"), (ids.to("mtia"),), on_mtia)
    path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / f"{name}.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        out = runner(ids.to("mtia"), **on_mtia)
    assert out.device.type == "mtia"
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
