"""torchdiffeq's ode_demo example: a neural ODE fitted to a spiral's trajectory, odeint through an MLP, RMSprop."""
import torch
from torch import nn
from torchdiffeq import odeint

true_y0 = torch.tensor([[2.0, 0.0]])
t = torch.linspace(0.0, 25.0, 1000)
true_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])


class Lambda(nn.Module):
    def forward(self, t, y):
        return torch.mm(y ** 3, true_A)


with torch.no_grad():
    true_y = odeint(Lambda(), true_y0, t, method="dopri5")


class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 50), nn.Tanh(), nn.Linear(50, 2))

    def forward(self, t, y):
        return self.net(y ** 3)


def get_batch(batch_time=10, batch_size=20):
    s = torch.randint(0, 1000 - batch_time, (batch_size,))
    return true_y[s], t[:batch_time], torch.stack([true_y[s + i] for i in range(batch_time)], dim=0)


func = ODEFunc()
optimizer = torch.optim.RMSprop(func.parameters(), lr=1e-3)
for _itr in range(1, 300):
    optimizer.zero_grad()
    batch_y0, batch_t, batch_y = get_batch()
    pred_y = odeint(func, batch_y0, batch_t)
    loss = torch.mean(torch.abs(pred_y - batch_y))
    loss.backward()
    optimizer.step()
