import torch
import torch.nn.functional as F

model = torch.nn.Linear(64, 10).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    x, y = torch.randn(32, 64, device="cuda"), torch.randint(0, 10, (32,), device="cuda")
    loss = F.cross_entropy(model(x), y)  # FINDING
    total = loss.detach()
    loss.backward()
    optimizer.step()
