"""A training script written the way GPU code is: a small transformer language model trained under
``torch.autocast(device, dtype=torch.bfloat16)`` on whatever device there is. Where the device runs bf16 natively
(a GPU, a CPU with AVX512-BF16 or AMX) that is a gain; on a CPU that emulates bf16 every step runs many times
slower than in float32 (slow-precision, at the autocast line, with the roofs measured in the script's process).
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, LENGTH, STEPS = 256, 128, 32, 60


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.head(self.body(self.embed(tokens), mask=mask, is_causal=True))


def main() -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (8, LENGTH), generator=generator).to(device)
        with torch.autocast(device, dtype=torch.bfloat16):  # expect where bf16 is emulated: slow-precision
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
