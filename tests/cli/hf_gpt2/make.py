#!/usr/bin/env python3
"""make.py — wrote this directory: a 6-head GPT-2 (n_embd 24, 2 blocks, 8
positions, 64 tokens) saved by transformers' GPT2LMHeadModel.save_pretrained
as a sharded checkpoint (model.safetensors.index.json, its shards and
config.json, as transformers writes them: the `transformer.` prefix, no
shape keys in the metadata, the tied lm_head.weight left out), and
expected.json: a batch of 2 x 8 tokens and transformers' loss on it (eval
mode, the mean cross-entropy of the next token), which cli_hf_files compares
with tessera's first step. Needs torch and transformers; the test does not
run it (it reads the files it wrote):

    python3 make.py OUT_DIR
"""
import json
import os
import random
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

out = sys.argv[1]
torch.manual_seed(0)
B, T, V = 2, 8, 64
cfg = GPT2Config(n_head=6, n_embd=24, n_layer=2, n_positions=T, vocab_size=V)
model = GPT2LMHeadModel(cfg)
with torch.no_grad():  # weights larger than the initialisation's: the head count shows
    for name, p in model.named_parameters():
        if p.dim() == 2:
            p.normal_(0, 0.3)
        elif name.endswith("weight"):
            p.uniform_(0.5, 1.5)
        else:
            p.normal_(0, 0.1)
model.eval()
model.save_pretrained(out, max_shard_size="24KB")
for extra in ("generation_config.json",):
    if os.path.exists(os.path.join(out, extra)):
        os.remove(os.path.join(out, extra))
random.seed(5)
tokens = [random.randrange(V) for _ in range(B * T + 1)]
x = torch.tensor([tokens[b * T:b * T + T] for b in range(B)])
y = torch.tensor([tokens[b * T + 1:b * T + T + 1] for b in range(B)])
with torch.no_grad():
    logits = model(input_ids=x).logits.double()
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()
json.dump({"tokens": tokens, "batch": B, "seq": T, "loss": loss,
           "torch": torch.__version__, "transformers": transformers.__version__},
          open(os.path.join(out, "expected.json"), "w"))
print("loss %.17g" % loss)
