"""What tells the step window that a script trains, and when it evaluates, from the script's own calls.

A script that creates an optimizer trains, and its steps are the optimizer's: forwards are never steps
then, and the window waits for the first optimizer step, however many forwards come first (an evaluation
pass, forty micro-steps of gradient accumulation). A backward with no optimizer marks a loop that updates its
parameters by hand: its backwards are its steps. Otherwise the model's forwards are its steps (an inference
loop). ``model.eval()`` called in a training loop marks an evaluation inside the step; ``model.train()``
after it starts the step's clock again (a step still in eval mode at its end is not timed).
"""

from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING

from advisor.files import intercept
from advisor.run.kinds import BACKWARD, FORWARD
from advisor.sources import user_frame

if TYPE_CHECKING:
    from advisor.script.window import StepWindow

OPTIMIZER_CREATED = "an optimizer was created"


class TrainingSigns:
    """What the step window does on each sign (a mixin of ``StepWindow``: it reads and sets the window's state)."""

    def optimizer_seen(self, reason: str) -> None:
        self.optimizer_created = True
        self.contents.stop_watching_data()  # an optimizer updates the parameters: no update by hand to look for
        self.training_seen(reason)

    def after_backward(self) -> None:
        """A backward returned: in a script with no optimizer (it updates its parameters by hand), a step."""
        if self.optimizer_created or self.optimizers or self.mode == "inference" or self.done:
            return
        self.training_seen("a backward ran")
        self.boundary(BACKWARD)

    def evaluation_over(self) -> None:
        """The script switched its model back to train mode after an evaluation inside the step: the step's
        clock starts again, so the evaluation is not timed as the step's (nor profiled as it)."""
        self.evaluating = False
        if self.done or self.kind is None:
            return
        self.restarts_after_evaluation += 1
        self.contents.restart()
        self.step_forwards.clear()
        if self.profiler is not None:
            self._restart_profiled_step()
        self.waiting, self.last = 0.0, time.perf_counter()
        self.journal_spent = getattr(intercept.LAYER, "spent", 0.0)

    def training_seen(self, reason: str) -> None:
        """A sign of training (training_signs.py): forwards are no longer steps. Forwards counted as steps
        so far were an evaluation or the micro-steps before the first optimizer step: counting restarts."""
        if self.trains or self.mode == "inference" or self.done:
            return
        self.trains = True
        if self.kind == FORWARD:
            self._restart()
        if not self.optimizer_steps:
            self.write("waiting.json", {"reason": reason, "forwards": sum(e[1] for e in self.outermost.values() if e[4]),
                                        "ends_at": "each optimizer step" if self.optimizer_created else "each backward"})


def watch_training_signs(window: StepWindow) -> None:
    import torch

    owner = os.getpid()
    created = torch.optim.Optimizer.__init__

    @functools.wraps(created)
    def optimizer_init(optimizer, *args, **kwargs):
        if os.getpid() == owner:
            # torch.optim imports Dynamo at the process's first optimizer: a library that creates its optimizers
            # inside its first steps (Pyro's, per parameter) would run that import under the collector's tracing of
            # allocations (80 s of a 36-step window). The tracing waits for a step the optimizer is made before.
            window.collector.abandon_tracing()
            window.optimizer_sites.setdefault(id(optimizer), user_frame(2))  # the user's line that made it
        created(optimizer, *args, **kwargs)
        if os.getpid() == owner:
            window.optimizer_seen(OPTIMIZER_CREATED)
    torch.optim.Optimizer.__init__ = optimizer_init

    backward = torch.autograd.backward  # Tensor.backward calls it by this name
    tensor_backward = torch.Tensor.backward
    inside = [0]  # Tensor.backward calls, nested: a TorchFunctionMode dispatches it to itself again

    @functools.wraps(backward)
    def watched_backward(*args, **kwargs):
        mine = os.getpid() == owner
        if mine:
            window.backward_seen = True
            window.contents.backward()
            window.in_backward += 1  # forwards run now are recomputations (gradient checkpointing), not calls
        try:
            result = backward(*args, **kwargs)
        finally:
            if mine:
                window.in_backward -= 1
        if mine and not inside[0]:
            window.after_backward()  # torch.autograd.backward called by the script itself
        return result
    torch.autograd.backward = watched_backward

    @functools.wraps(tensor_backward)
    def watched_tensor_backward(*args, **kwargs):
        # the step may end after a backward: only once the outermost call has returned, with every
        # TorchFunctionMode (advisor's source annotator among them) back in place, may the window act
        inside[0] += 1
        try:
            result = tensor_backward(*args, **kwargs)
        finally:
            inside[0] -= 1
        if not inside[0] and os.getpid() == owner:
            window.after_backward()
        return result
    torch.Tensor.backward = watched_tensor_backward

    set_mode = torch.nn.Module.train

    @functools.wraps(set_mode)
    def train(module, mode: bool = True):
        if os.getpid() == owner and window.trains:
            if not mode:
                window.evaluating = True
            elif window.evaluating:
                window.evaluation_over()  # back to training after an evaluation inside the step
        return set_mode(module, mode)
    torch.nn.Module.train = train
