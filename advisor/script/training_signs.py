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
import time
from typing import Callable

from advisor.files import intercept
from advisor.run.kinds import BACKWARD, FORWARD
from advisor.script.window_state import WindowState
from advisor.sources import user_frame

OPTIMIZER_CREATED = "an optimizer was created"


class TrainingSigns:
    """What the step window does on each sign: the state it sets, and the window's callbacks it calls (a step's
    end, counting started again, the profiled step's range entered again)."""

    def __init__(self, state: WindowState, boundary: Callable[[str], None], restart: Callable[[], None],
                 restart_profiled_step: Callable[[], None]):
        self.state = state
        self.boundary = boundary
        self.restart = restart
        self.restart_profiled_step = restart_profiled_step

    def optimizer_seen(self, reason: str) -> None:
        self.state.optimizer_created = True
        self.state.contents.stop_watching_data()  # an optimizer updates the parameters: no update by hand to look for
        self.training_seen(reason)

    def after_backward(self) -> None:
        """A backward returned: in a script with no optimizer (it updates its parameters by hand), a step."""
        state = self.state
        if state.optimizer_created or state.optimizers or state.mode == "inference" or state.done:
            return
        self.training_seen("a backward ran")
        self.boundary(BACKWARD)

    def evaluation_over(self, profiling: bool) -> None:
        """The script switched its model back to train mode after an evaluation inside the step: the step's
        clock starts again, so the evaluation is not timed as the step's (nor profiled as it)."""
        state = self.state
        state.evaluating = False
        if state.done or state.kind is None:
            return
        state.restarts_after_evaluation += 1
        state.contents.restart()
        state.step_forwards.clear()
        if profiling:
            self.restart_profiled_step()
        state.waiting, state.last = 0.0, time.perf_counter()
        state.journal_spent = getattr(intercept.LAYER, "spent", 0.0)

    def training_seen(self, reason: str) -> None:
        """A sign of training (training_signs.py): forwards are no longer steps. Forwards counted as steps
        so far were an evaluation or the micro-steps before the first optimizer step: counting restarts."""
        state = self.state
        if state.trains or state.mode == "inference" or state.done:
            return
        state.trains = True
        if state.kind == FORWARD:
            self.restart()
        if not state.optimizer_steps:
            state.write("waiting.json", {"reason": reason,
                                         "forwards": sum(e.calls for e in state.outermost.values() if e.parameters),
                                         "ends_at": "each optimizer step" if state.optimizer_created
                                         else "each backward"})

    def install(self, profiling: Callable[[], bool]) -> None:
        """torch's optimizer constructor, backward and ``Module.train`` watched for the signs. ``profiling``: whether
        a profiled step is running now."""
        import torch

        state = self.state
        created = torch.optim.Optimizer.__init__

        @functools.wraps(created)
        def optimizer_init(optimizer, *args, **kwargs):
            if state.mine:
                # torch.optim imports Dynamo at the process's first optimizer: a library that creates its optimizers
                # inside its first steps (Pyro's, per parameter) would run that import under the collector's tracing
                # of allocations (80 s of a 36-step window). The tracing waits for a step the optimizer is made before.
                state.collector.abandon_tracing()
                state.optimizer_sites.setdefault(id(optimizer), user_frame(2))  # the user's line that made it
            created(optimizer, *args, **kwargs)
            if state.mine:
                self.optimizer_seen(OPTIMIZER_CREATED)
        torch.optim.Optimizer.__init__ = optimizer_init

        backward = torch.autograd.backward  # Tensor.backward calls it by this name
        tensor_backward = torch.Tensor.backward
        inside = [0]  # Tensor.backward calls, nested: a TorchFunctionMode dispatches it to itself again

        @functools.wraps(backward)
        def watched_backward(*args, **kwargs):
            mine = state.mine
            if mine:
                state.backward_seen = True
                state.contents.backward()
                state.in_backward += 1  # forwards run now are recomputations (gradient checkpointing), not calls
            try:
                result = backward(*args, **kwargs)
            finally:
                if mine:
                    state.in_backward -= 1
            if mine and not inside[0]:
                self.after_backward()  # torch.autograd.backward called by the script itself
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
            if not inside[0] and state.mine:
                self.after_backward()
            return result
        torch.Tensor.backward = watched_tensor_backward

        set_mode = torch.nn.Module.train

        @functools.wraps(set_mode)
        def train(module, mode: bool = True):
            if state.mine and state.trains:
                if not mode:
                    state.evaluating = True
                elif state.evaluating:
                    self.evaluation_over(profiling())  # back to training after an evaluation inside the step
            return set_mode(module, mode)
        torch.nn.Module.train = train
