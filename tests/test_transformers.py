"""Hugging Face transformers models, unmodified, on mtia: the same results as CPU.

Models are built from small configs (no downloads) with dropout off by config
(T5's attention dropout is functional: dropout_rate=0 turns it off too). Each
trains one AdamW step and generates greedily on CPU and on mtia from the same
initial weights and batch; losses and logits must agree to 1e-4 and the
generated tokens exactly. transformers is a pinned test dependency
(scripts/setup.sh).
"""
import copy

import pytest
import torch
import transformers
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          T5Config, T5ForConditionalGeneration)

VOCAB = 128


def gpt2():
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=VOCAB, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def bert():
    return BertForMaskedLM(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                      intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def llama():
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, vocab_size=VOCAB,
                                        max_position_embeddings=64))


def t5():
    return T5ForConditionalGeneration(T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, num_heads=2,
                                               d_kv=32, vocab_size=VOCAB, dropout_rate=0.0, pad_token_id=0,
                                               decoder_start_token_id=0, eos_token_id=1))


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5}


def batch(name):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (2, 16), generator=g)
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(2, VOCAB, (2, 8), generator=g)}
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def run(model, name, device):
    model = copy.deepcopy(model).to(device).train()
    data = {k: v.to(device) for k, v in batch(name).items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = model(**data)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    with torch.no_grad():
        logits = model(**data).logits
    result = {"loss": out.loss.detach().cpu(), "logits": logits.cpu(),
              "params": {n: p.detach().cpu() for n, p in model.named_parameters()}}
    if name != "bert":
        with torch.no_grad():
            prompt = data["input_ids"][:, :6]
            gen = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8,
                                 do_sample=False, pad_token_id=0)
        result["generated"] = gen.cpu()
    return result


@pytest.mark.parametrize("name", list(MODELS))
def test_train_step_and_generate_equal_cpu(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    cpu, mtia = run(model, name, "cpu"), run(model, name, "mtia")
    torch.testing.assert_close(mtia["loss"], cpu["loss"], atol=1e-4, rtol=0)
    for n, p in cpu["params"].items():
        torch.testing.assert_close(mtia["params"][n], p, atol=1e-4, rtol=0, msg=f"{name}: parameter {n}")
    torch.testing.assert_close(mtia["logits"], cpu["logits"], atol=1e-4, rtol=0)
    if "generated" in cpu:
        assert torch.equal(mtia["generated"], cpu["generated"]), (mtia["generated"], cpu["generated"])


def word_tokenizer():
    """A word-level tokenizer made here: w0 ... w127 (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers import decoders
    tok.decoder = decoders.WordPiece(prefix="##")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", pad_token="w0",
                                                eos_token="w1")


def test_text_generation_pipeline_on_mtia():
    torch.manual_seed(0)
    model = gpt2().eval()
    tok = word_tokenizer()
    texts = {}
    for device in ("cpu", "mtia"):
        pipe = transformers.pipeline("text-generation", model=copy.deepcopy(model), tokenizer=tok, device=device)
        assert pipe.model.device.type == device
        out = pipe("w5 w17 w42", max_new_tokens=6, do_sample=False)
        texts[device] = out[0]["generated_text"]
    assert texts["mtia"] == texts["cpu"], texts
    assert texts["mtia"].startswith("w5 w17 w42") and len(texts["mtia"].split()) > 3, texts
