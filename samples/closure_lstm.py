"""Sine-wave sequence prediction trained with LBFGS, as pytorch/examples' time_sequence_prediction trains it: two
``LSTMCell``s stepped in a Python loop over 49 time steps, in float64, and an optimizer whose step runs the
closure (zero_grad, forward, loss, backward) up to ``max_iter`` times (kernel-storm). The float64 the example
keeps (NumPy's arrays, the model ``.double()``-ed) runs its matmuls at about half float32's roof (slow-precision).

One step is thousands of operators of a few microseconds each doing almost no work: the one-op dispatch floor
explains little of it (autograd's recording and allocation are most of each op's cost), yet a compiled forward
removes most of it. The optimizer needs a closure: the audit's step gives it one.
"""

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
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))  # expect: kernel-storm
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs += [self.linear(h_t2)]
        return torch.cat(outputs, dim=1)


def _data():
    rng = np.random.default_rng(2)
    x = np.array(range(50)) + rng.integers(-80, 80, 24).reshape(24, 1)
    data = np.sin(x / 5.0).astype("float64")
    return torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:])


def get_model():
    torch.manual_seed(0)
    return Sequence().double()  # expect: slow-precision


def get_inputs():
    return _data()[0]


def get_optimizer(model):
    return torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=4)


def loss_fn(output, inputs):
    return nn.functional.mse_loss(output, _data()[1])
