"""A healthy model whose names break naive JSON: a module class and a profiler label with quotes.

torch.profiler writes such names verbatim, so its Kineto trace is invalid JSON; advisor repairs
it while reading, and the audit goes on with every rule: no finding, no error.
"""

import torch
from torch import nn
from torch.profiler import record_function

QuotedBlock = type('Block "v2"', (nn.Module,), {})  # a class name with quotes, as code generators make


def _block_init(self, width):
    nn.Module.__init__(self)
    self.proj = nn.Linear(width, width)


def _block_forward(self, x):
    with record_function('stage "encode" \\ part 1'):  # a label with quotes and a backslash
        return torch.relu(self.proj(x))


QuotedBlock.__init__ = _block_init
QuotedBlock.forward = _block_forward


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*(QuotedBlock(128) for _ in range(3)))
        self.head = nn.Linear(128, 8)

    def forward(self, x):
        return self.head(self.blocks(x))


def get_model():
    torch.manual_seed(0)
    return Net().eval()


def get_inputs():
    return torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
# expect nothing
