"""Sine-wave sequence prediction trained with LBFGS, in the style of pytorch/examples' time_sequence_prediction:
two ``LSTMCell``s stepped in a Python loop over the time steps, in float64, and ``optimizer.step(closure)``,
where LBFGS runs the closure (a forward and a backward each) up to ``max_iter`` times per step.

advisor run's step is one optimizer step with every closure evaluation inside it.
"""

import argparse

import numpy as np
import torch
from torch import nn


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):  # one time step at a time
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs += [self.linear(h_t2)]
        return torch.cat(outputs, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    np.random.seed(0)
    torch.manual_seed(0)
    x = np.array(range(50)) + np.random.randint(-80, 80, 24).reshape(24, 1)
    data = np.sin(x / 5.0).astype("float64")
    input, target = torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:])
    seq = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=8)
    for _ in range(args.steps):
        def closure():
            optimizer.zero_grad()
            out = seq(input)  # FORWARD LINE
            loss = criterion(out, target)
            print("loss:", loss.item())  # ITEM LINE
            loss.backward()
            return loss
        optimizer.step(closure)  # STEP LINE


if __name__ == "__main__":
    main()
