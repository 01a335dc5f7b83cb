"""The end of the step window, and what it writes: the window's measurements, the script's own end before the
window's (kept, and said), the steps after the window under ``--full``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from advisor.files import intercept, stop
from advisor.files.intercept import suspended
from advisor.run.kinds import BACKWARD, FORWARD, OPTIMIZER, PROFILER_STEP
from advisor.script.failures import distributed
from advisor.script.profiled_steps import ProfiledSteps
from advisor.script.window_state import WindowState

if TYPE_CHECKING:
    from advisor.script.marker import MarkerWatch
    from advisor.script.measured_run import MeasuredRun


class WindowEnd:
    def __init__(self, state: WindowState, profiled: ProfiledSteps, drop_forward_hooks: Callable[[], None],
                 verification: MeasuredRun | None, marker_watch: MarkerWatch | None):
        self.state = state
        self.profiled = profiled
        self.drop_forward_hooks = drop_forward_hooks
        self.verification = verification
        self.marker_watch = marker_watch

    def log_after_window(self, kind: str) -> None:
        """--full: the steps after the window, logged to the script's end."""
        state = self.state
        if state.full and kind == state.kind and not state.measure_only:
            state.log.step_ended(state, time.perf_counter())
            state.collector.step_ended(timed=False)
            state.waiting, state.journal_spent = 0.0, getattr(intercept.LAYER, "spent", 0.0)
            state.log.step_started()

    def on_exit(self) -> None:
        """The script ended before the window did: keep what was measured, and say so."""
        if not self.state.mine or self.state.done:
            return
        if self.marker_watch is not None and not self.marker_watch.matched:
            self.marker_watch.say_unmatched()
        self.end_early()
        self.finish(stopped=False, ended_early=True)

    def end_early(self) -> None:
        state = self.state
        self.profiled.drop()
        if self.profiled.calls is not None:
            watched = state.count - (state.warmup + state.steps + state.profile_steps)
            if watched > 0:
                self.profiled.write_calls(watched)
            else:
                self.profiled.stop_calls()

    def measured(self, stopped: bool, ended_early: bool = False) -> dict:
        state = self.state
        state.machine.stop()  # a script that ended within the timed steps: the conditions until then
        conditions = state.machine.conditions
        return {"kind": state.kind, "steps_seen": state.count, "samples_ms": list(state.samples_ms),
                "step": step_reading(state), "restarts_after_evaluation": state.restarts_after_evaluation,
                "data_wait_ms": list(state.data_wait_ms), "stopped": stopped, "ended_early": ended_early,
                "warmup_steps": state.warmup, "optimizers": len(state.optimizers), "distributed": distributed(),
                "evaluations": state.evaluations, "collector": state.collector.measured(), "step_log": state.log.steps,
                "inference_call": list(state.inference.site) if state.inference.site else None,
                "first_rollout": state.first_rollout, "rollout_places": state.inference.sampler.places(),
                "conditions": conditions.model_dump(mode="json") if conditions else None}

    def finish(self, stopped: bool, ended_early: bool = False, interrupted: bool = False) -> None:
        """Write what the window measured (advisor's own files); when ``stopped``, end the process
        here, at a step's end, once the script's writes are whole (``stop.stop_now``)."""
        state = self.state
        state.done = True
        state.contents.end_counting()
        self.drop_forward_hooks()  # the window is over (and Dynamo, capturing the graph, warns about global hooks)
        state.inference.remove()  # before the model is copied: a copy would carry the hooks
        state.inference.sampler.allowed = False  # --full's steps after the window are judged as run: no timer then
        measured = {**self.measured(stopped, ended_early), "interrupted": interrupted}
        with suspended():
            if not state.measure_only:
                state.write("window.json", measured)  # first: describing takes seconds, and torchrun may stop a rank
                if not interrupted or state.samples_ms:
                    try:
                        from advisor.script.describe_run import describe_run
                        describe_run(state)
                    except Exception as failure:  # noqa: BLE001 - what was measured is still written
                        state.write("describe_error.json", {"message": f"{type(failure).__name__}: {failure}"})
            extra = self.verification.summary() if self.verification is not None else {}
            state.write("window.json", {**measured, **extra})
        # a training callback's window never stops the training; the callback withdraws its fix after the step (torch
        # is still calling the optimizer's hooks here, and withdrawing removes some of them)
        in_training = state.spec.in_training
        lead = state.lead_seen()
        if state.full and not stopped and not state.measure_only and lead is not None and state.kind != FORWARD:
            state.inference.watch(lead.module)  # --full: the steps after the window log the model's calls without grad
        if stopped and not in_training:
            stop.stop_now(0, at_boundary=True)


def step_reading(state: WindowState) -> dict | None:
    """What one step contained (the last whole warm-up step) and how its end was recognised."""
    reading = state.contents.reading()
    if reading is None or state.kind is None:
        return None
    return {**reading, "recognised_by": _recognised_by(state)}


def _recognised_by(state: WindowState) -> str:
    if state.kind == OPTIMIZER:
        lead: Any = state.optimizers.get(state.lead)
        name = type(lead).__name__ if lead is not None else "the optimizer"
        several = (f", the one stepping least often of the script's {len(state.optimizers)} optimizers: one whole "
                   "iteration" if len(state.optimizers) > 1 else "")
        return f"each step of {name}{several}"
    if state.kind == BACKWARD:
        return "each backward: the script runs backwards but creates no optimizer (it updates its parameters itself)"
    if state.kind == FORWARD:
        seen = state.lead_seen()
        name = type(seen.module).__name__ if seen is not None else "the model"
        return (f"each call of {name}, the outermost module with the most parameters: the script ran no backward "
                "and created no optimizer" if state.mode != "inference" else f"each call of {name} (--mode inference)")
    if state.kind == PROFILER_STEP:
        return "each of the script's own prof.step() calls"
    return f"each return of --step-marker {state.marker}"
