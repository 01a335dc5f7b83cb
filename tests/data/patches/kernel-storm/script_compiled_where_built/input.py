import torch

model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8)))
for step in range(10):
    out = model(torch.randn(4, 8))  # FINDING
