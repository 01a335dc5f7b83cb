"""Transformers' text generation (model.generate), greedy, on a small GPT-2 built from a config (no hub here)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=5000)).eval()
prompts = torch.randint(0, 5000, (8, 32), generator=torch.Generator().manual_seed(0))
for _round in range(20):
    out = model.generate(prompts, max_new_tokens=64, do_sample=False, pad_token_id=0)
