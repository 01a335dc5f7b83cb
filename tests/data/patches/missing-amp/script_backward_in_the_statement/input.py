import torch

model = torch.nn.Linear(64, 10)
for step in range(10):
    model(torch.randn(32, 64)).sum().backward()  # FINDING
