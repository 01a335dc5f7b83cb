"""Accelerate's quickstart: a plain training loop with Accelerator.prepare and accelerator.backward."""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True)
model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(16384, 128), torch.randint(0, 10, (16384,)))
loader = DataLoader(data, batch_size=64, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for _epoch in range(3):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
