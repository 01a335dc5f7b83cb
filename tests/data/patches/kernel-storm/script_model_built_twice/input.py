import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8))
if torch.cuda.is_available():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
for step in range(10):
    out = model(torch.randn(4, 8))  # FINDING
