"""What tells the step window that a script trains, and when it evaluates, from the script's own calls.

A script that creates an optimizer trains, and its steps are the optimizer's: forwards are never steps
then, and the window waits for the first optimizer step, however many forwards come first (an evaluation
pass, forty micro-steps of gradient accumulation). Until an optimizer is created, its outermost forwards
may be its steps (an inference loop; or a loop that updates its parameters by hand, which a backward marks
as training). ``model.eval()`` called in a training loop marks the step it falls in as an
evaluation, which is not timed as a step.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.run.window import StepWindow

OPTIMIZER_CREATED = "an optimizer was created"


def watch_training_signs(window: StepWindow) -> None:
    import torch

    owner = os.getpid()
    created = torch.optim.Optimizer.__init__

    @functools.wraps(created)
    def optimizer_init(optimizer, *args, **kwargs):
        created(optimizer, *args, **kwargs)
        if os.getpid() == owner:
            window.training_seen(OPTIMIZER_CREATED)
    torch.optim.Optimizer.__init__ = optimizer_init

    backward = torch.autograd.backward  # Tensor.backward calls it by this name

    @functools.wraps(backward)
    def watched_backward(*args, **kwargs):
        if os.getpid() == owner:
            window.backward_seen = True
        return backward(*args, **kwargs)
    torch.autograd.backward = watched_backward

    set_mode = torch.nn.Module.train

    @functools.wraps(set_mode)
    def train(module, mode: bool = True):
        if not mode and window.trains and os.getpid() == owner:
            window.evaluating = True
        return set_mode(module, mode)
    torch.nn.Module.train = train
