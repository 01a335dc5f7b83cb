"""A clean training script: in-memory batches, no per-step syncs, checkpoints or in-place zeroing,
and a model too small for reduced precision to pay (0.03 GFLOP per step).

advisor run should report nothing here.
"""

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
    target = torch.randn(64, 128, generator=torch.Generator().manual_seed(2))
    for _ in range(60):
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
