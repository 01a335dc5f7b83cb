"""x-transformers' quickstart: a decoder-only TransformerWrapper in an AutoregressiveWrapper, trained on token
sequences (its enwik8 example, on random tokens)."""
import torch
from x_transformers import AutoregressiveWrapper, Decoder, TransformerWrapper

model = AutoregressiveWrapper(TransformerWrapper(num_tokens=256, max_seq_len=256,
                                                 attn_layers=Decoder(dim=256, depth=4, heads=4)))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
data = torch.randint(0, 256, (64, 256), generator=torch.Generator().manual_seed(0))  # 255 in, 255 targets
for step in range(200):
    loss = model(data[(step * 8) % 64:(step * 8) % 64 + 8])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    optimizer.zero_grad()
