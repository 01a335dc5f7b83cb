"""The end of the step window, and what it writes: the window's measurements, the script's own end before the
window's (kept, and said), the steps after the window under ``--full``. A mixin of ``StepWindow``: it reads and
sets the window's state."""

from __future__ import annotations

import json
import os
import time

from advisor.files import intercept, stop
from advisor.files.intercept import suspended
from advisor.run.kinds import FORWARD
from advisor.script.failures import distributed
from advisor.script.step_contents import step_reading


class WindowEnd:
    def _log_after_window(self, kind: str) -> None:
        """--full: the steps after the window, logged to the script's end."""
        if self.full and kind == self.kind and not self.measure_only:
            self.log.step_ended(self, time.perf_counter())
            self.collector.step_ended(timed=False)
            self.waiting, self.journal_spent = 0.0, getattr(intercept.LAYER, "spent", 0.0)
            self.log.step_started()

    def on_exit(self) -> None:
        """The script ended before the window did: keep what was measured, and say so."""
        if os.getpid() != self.owner or self.done:
            return
        if self.marker_watch is not None and not self.marker_watch.matched:
            self.marker_watch.say_unmatched()
        self.end_early()
        self.finish(stopped=False, ended_early=True)

    def end_early(self) -> None:
        self._drop_profile()
        if self.calls is not None:
            watched = self.count - (self.warmup + self.steps + self.profile_steps)
            if watched > 0:
                self._write_calls(watched)
            else:
                self.calls.__exit__(None, None, None)
                self.calls = None

    def measured(self, stopped: bool, ended_early: bool = False) -> dict:
        self.machine.stop()  # a script that ended within the timed steps: the conditions until then
        return {"kind": self.kind, "steps_seen": self.count, "samples_ms": list(self.samples_ms),
                "step": step_reading(self), "restarts_after_evaluation": self.restarts_after_evaluation,
                "data_wait_ms": list(self.data_wait_ms), "stopped": stopped, "ended_early": ended_early,
                "warmup_steps": self.warmup, "optimizers": len(self.optimizers), "distributed": distributed(),
                "evaluations": self.evaluations, "collector": self.collector.measured(), "step_log": self.log.steps,
                "inference_call": list(self.inference.site) if self.inference.site else None,
                "first_rollout": self.first_rollout, "rollout_places": self.inference.sampler.places(),
                "conditions": self.machine.conditions.model_dump(mode="json") if self.machine.conditions else None}

    def finish(self, stopped: bool, ended_early: bool = False, interrupted: bool = False) -> None:
        """Write what the window measured (advisor's own files); when ``stopped``, end the process
        here, at a step's end, once the script's writes are whole (``stop.stop_now``)."""
        self.done = True
        self.contents.end_counting()
        self._drop_forward_hooks()  # the window is over (and Dynamo, capturing the graph, warns about global hooks)
        self.inference.remove()  # before the model is copied: a copy would carry the hooks
        self.inference.sampler.allowed = False  # --full's steps after the window are judged as run: no timer in them
        measured = {**self.measured(stopped, ended_early), "interrupted": interrupted}
        with suspended():
            if not self.measure_only:
                self.write("window.json", measured)  # first: describing takes seconds, and torchrun may stop a rank
                if not interrupted or self.samples_ms:
                    try:
                        from advisor.script.describe_run import describe_run
                        describe_run(self)
                    except Exception as failure:  # noqa: BLE001 - what was measured is still written
                        self.write("describe_error.json", {"message": f"{type(failure).__name__}: {failure}"})
            extra = self.verification.summary() if self.verification is not None else {}
            self.write("window.json", {**measured, **extra})
        lead = self.outermost.get(self.lead_module)
        if self.full and not stopped and not self.measure_only and lead is not None and self.kind != FORWARD:
            self.inference.watch(lead[0])  # --full: the steps after the window log the model's calls without grad too
        if stopped:
            stop.stop_now(0, at_boundary=True)

    def write(self, name: str, payload: dict) -> None:
        path = os.path.join(self.out, name)
        with suspended():
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            os.replace(path + ".tmp", path)

