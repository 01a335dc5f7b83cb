"""The stages the supervised child can run, registered by the packages that define them, and the loop
that runs them.

A package registers its stages with ``@stage("name")`` in a module of its own (``capture.stages``,
``verify.stage``, ``ready.probes``); a ``StagePlan`` names those modules and the stages to run, and the
child imports the modules before it runs the plan, so the child knows no command. A stage takes the
shared ``state`` (the spec, the loaded target) and returns its result as JSON text, ``None`` to be
skipped (``state["skip_reason"]`` says why), or raises AuditError. A stage whose last act was a step of the copy the
next stage steps again sets ``state["heap_warm"]`` to its name: the heap it left is not handed back, so the next
stage's step needs no step of its own to fault its pages in again. The same loop serves the child
process (events go over its control pipe) and the in-process Python API (events are recorded directly).
"""

from __future__ import annotations

import importlib
import re
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from advisor.errors import AuditError, StageError
from advisor.workload.heap import release_free_heap

Runner = Callable[[dict, Callable[[str], None]], "str | None"]
RUNNERS: dict[str, Runner] = {}
RUNS_THE_STEP: set[str] = set()  # stages that run the whole step: skipped once one of them failed
BEFORE_LOAD: set[str] = {"load"}  # stages that need no loaded model (they run before the user's file is imported)


def stage(name: str, runs_the_step: bool = False, before_load: bool = False) -> Callable[[Runner], Runner]:
    """Register a stage runner under ``name``."""
    def register(runner: Runner) -> Runner:
        RUNNERS[name] = runner
        if runs_the_step:
            RUNS_THE_STEP.add(name)
        if before_load:
            BEFORE_LOAD.add(name)
        return runner
    return register


@dataclass(frozen=True)
class StagePlan:
    """What a child runs: the modules that register the stages, and the stages in order."""

    modules: tuple[str, ...]
    stages: tuple[str, ...]

    def load(self) -> None:
        for module in self.modules:
            importlib.import_module(module)


class StageEvents(Protocol):
    """Where the loop reports: the child's control pipe, or the in-process recorder."""

    def start(self, stage: str) -> None: ...
    def progress(self, stage: str, text: str) -> None: ...
    def done(self, stage: str, payload: str) -> None: ...
    def error(self, stage: str, error: StageError) -> None: ...
    def skipped(self, stage: str, reason: str) -> None: ...


def run_stages(state: dict, stages: tuple[str, ...] | list[str], events: StageEvents) -> None:
    """Run the stages in order; after a failed model step the later step stages are skipped."""
    step_failed = False
    for stage in stages:
        if stage in RUNS_THE_STEP and step_failed:
            events.skipped(stage, "the model step already failed in an earlier stage")
            continue
        if stage not in BEFORE_LOAD and "target" not in state:
            events.skipped(stage, "the model file did not load")
            continue
        events.start(stage)
        outcome, payload = run_stage(state, stage, _throttled(lambda text, s=stage: events.progress(s, text)))
        if state.get("heap_warm") != stage:  # the stage's step left no heap the next stage's same step reuses
            release_free_heap()  # what the stage freed goes back before the next one allocates (workload/heap.py)
            state.pop("heap_warm", None)
        if outcome == "error":
            events.error(stage, payload)
            step_failed = step_failed or stage in RUNS_THE_STEP
        elif outcome == "skipped":
            events.skipped(stage, payload)
        else:
            events.done(stage, payload)


def run_stage(state: dict, stage: str, progress: Callable[[str], None]) -> tuple[str, Any]:
    """Run one stage: ("ok", result JSON), ("skipped", reason) or ("error", StageError)."""
    try:
        result = RUNNERS[stage](state, progress)
    except AuditError as failure:
        return "error", failure.error
    except BaseException as unexpected:  # noqa: BLE001 - report, never die silently
        return "error", StageError(
            stage=stage, kind="internal", message=f"{type(unexpected).__name__}: {unexpected}".strip(),
            detail="".join(traceback.format_exception(unexpected)),
        )
    if result is None:
        return "skipped", state.pop("skip_reason", "not applicable")
    return "ok", result


def _throttled(send: Callable[[str], None], interval_s: float = 1.0) -> Callable[[str], None]:
    """Pass on at most one message per interval of a counter ("12 timed steps", "13 timed steps"); a message of
    another kind (the stage saying what it does next) passes at once."""
    last = [time.monotonic(), ""]

    def progress(text: str) -> None:
        now, kind = time.monotonic(), re.sub(r"\d+", "#", text)
        if kind != last[1] or now - last[0] >= interval_s:
            last[0], last[1] = now, kind
            send(text)
    return progress
