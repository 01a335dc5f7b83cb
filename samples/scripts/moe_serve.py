"""An inference loop over a mixture of experts whose router collapsed onto one expert.

The gate's bias sends every token to expert 0 and the dispatch skips experts with no rows, so
seven of eight experts never run (moe-imbalance, measured on the script's own batches).
"""

import torch
from torch import nn
from torch.nn import functional as F


class Expert(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class CollapsedMoE(nn.Module):
    def __init__(self, width: int = 64, experts: int = 8):
        super().__init__()
        self.gate = nn.Linear(width, experts)
        self.experts = nn.ModuleList(Expert(width) for _ in range(experts))
        with torch.no_grad():
            self.gate.bias.copy_(torch.tensor([40.0] + [0.0] * (experts - 1)))

    def forward(self, x):
        choice = self.gate(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = (choice == index).nonzero(as_tuple=True)[0]
            if rows.numel():
                out[rows] = expert(x[rows])  # DISPATCH LINE
        return out


def main() -> None:
    torch.manual_seed(0)
    model = CollapsedMoE().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for _ in range(100):
            model(torch.randn(256, 64, generator=generator))


if __name__ == "__main__":
    main()
