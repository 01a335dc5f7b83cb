"""A model that checkpoints itself from forward, every call (checkpoint-in-step), training.

"Save every N steps" with N left at 1: the state (about 2 MB) is serialized and written
synchronously inside the step, and the step waits for the file.
"""

import atexit
import os
import tempfile

import torch
from torch import nn

CHECKPOINT = os.path.join(tempfile.gettempdir(), f"advisor-sample-{os.getpid()}.pt")


class SelfSaving(nn.Module):
    def __init__(self, every: int = 1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
        self.every, self.calls = every, 0

    def forward(self, x):
        self.calls += 1
        if self.calls % self.every == 0:
            torch.save(self.state_dict(), CHECKPOINT)  # synchronous, inside the step; expect: checkpoint-in-step
        return self.body(x)


def get_model():
    torch.manual_seed(0)
    return SelfSaving()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 256)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


@atexit.register
def _remove_checkpoint() -> None:  # each audit or verification process writes its own
    if os.path.exists(CHECKPOINT):
        os.remove(CHECKPOINT)
# expect anywhere before torch 2.14: graph-breaks
