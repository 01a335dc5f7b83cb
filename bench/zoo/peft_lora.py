"""PEFT's LoRA quickstart (get_peft_model with a LoraConfig, then train), on a small GPT-2 built from a config with
random tokens (no hub here)."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

base = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=5000, n_positions=256))
model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn"], lora_dropout=0.05,
                                        task_type="CAUSAL_LM"))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
tokens = torch.randint(0, 5000, (64, 128), generator=torch.Generator().manual_seed(0))
model.train()
for step in range(200):
    batch = tokens[(step * 8) % 64:(step * 8) % 64 + 8]
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
