"""The stages in this process, for the Python API (there is no model file to run in a child).

Results go through the same JSON as the child's, so evidence is built the same way; a hang or
crash of the model is not contained here.
"""

from __future__ import annotations

import time

from advisor.errors import StageError
from advisor.sandbox.registry import StagePlan, run_stages
from advisor.sandbox.supervisor import CaptureRun, StageOutcome


class _Recorder:
    """The stage events, recorded straight into a CaptureRun (with each stage's seconds)."""

    def __init__(self, run: CaptureRun):
        self.run = run
        self.started = time.monotonic()

    def _seconds(self) -> float:
        return time.monotonic() - self.started

    def start(self, stage: str) -> None:
        self.started = time.monotonic()

    def progress(self, stage: str, text: str) -> None:
        pass

    def done(self, stage: str, payload: str) -> None:
        self.run.outcomes[stage] = StageOutcome(stage, "ok", self._seconds(), result=payload)

    def error(self, stage: str, error: StageError) -> None:
        self.run.outcomes[stage] = StageOutcome(stage, "error", self._seconds(), error=error)

    def skipped(self, stage: str, reason: str) -> None:
        self.run.outcomes[stage] = StageOutcome(stage, "skipped", note=reason)


def run_inline(state: dict, plan: StagePlan) -> CaptureRun:
    """Run the ``plan``'s stages over ``state`` here; a state that holds a ``target`` needs no load stage."""
    plan.load()
    run = CaptureRun()
    run_stages(state, plan.stages, _Recorder(run))
    return run
