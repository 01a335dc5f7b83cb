"""The model's calls without grad between its updates, in the script's process: a rollout's policy, generation,
an evaluation. From the warm-up's end two hooks on the model itself (not on every module) time each call made
without grad; each logged step records how many there were, how long they took, their batch, and the span from
the first to the last (a rollout: its environment's steps between the calls are in it), and where the time between
the calls goes (``rollout_sampler.py``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from advisor.script.rollout_sampler import RolloutSampler
from advisor.sources import ADVISOR_DIR, TORCH_DIR, direct_user_caller, user_frame_of


class InferenceCalls:
    def __init__(self) -> None:
        self.handles: list = []
        self.owner = os.getpid()
        self.site: tuple[str, int] | None = None  # the user's line of the first call without grad
        self._started: float | None = None
        self.sampler = RolloutSampler()  # where the time between the calls goes
        self._reset()

    def _reset(self) -> None:
        self.count, self.seconds, self.batches = 0, 0.0, []
        self.first: float | None = None
        self.last: float | None = None

    def watch(self, model: Any) -> None:
        if self.handles:
            return
        self.handles = [model.register_forward_pre_hook(self._enter),
                        model.register_forward_hook(self._leave, always_call=True)]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self._started = None
        self.sampler.disarm()

    def _enter(self, module: Any, args: tuple) -> None:
        self.enter(args, depth=2)

    def enter(self, args: tuple, depth: int = 1) -> None:
        """A call of the model begins (``depth``: frames between the caller of the model and here)."""
        torch = sys.modules["torch"]
        if torch.is_grad_enabled() or self._started is not None or os.getpid() != self.owner:
            return  # an update's forward, a call inside a call, a forked worker
        if self.site is None:  # the user's line that calls the model, else the user's line a library called it under
            frame = sys._getframe(depth)
            while frame is not None and frame.f_code.co_filename.startswith((TORCH_DIR, ADVISOR_DIR)):
                frame = frame.f_back
            self.site = direct_user_caller(frame) or user_frame_of(frame)
            self.sampler.loop_code = frame.f_code if frame is not None else None  # the loop making the calls
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None and first.dim() > 0:
            self.batches.append(int(first.shape[0]))
        self._started = time.perf_counter()
        self.sampler.in_call = True
        if self.first is None:
            self.first = self._started
            self.sampler.arm()

    def _leave(self, module: Any, args: tuple, output: Any) -> None:
        self.leave()

    def leave(self) -> None:
        if self._started is None:
            return
        now = time.perf_counter()
        self.sampler.in_call = False
        self.count += 1
        self.seconds += now - self._started
        self.last, self._started = now, None

    def take(self) -> dict[str, Any]:
        """This step's calls, for its log entry; the counters start again."""
        self.sampler.step_ended(self.last if self.count else None)
        batches = sorted(self.batches)
        taken = {"inference_forwards": self.count, "inference_ms": round(self.seconds * 1000, 4),
                 "rollout_ms": round((self.last - self.first) * 1000, 4) if self.count and self.last else 0.0,
                 "inference_batch": batches[len(batches) // 2] if batches else None}
        self._reset()
        return taken
