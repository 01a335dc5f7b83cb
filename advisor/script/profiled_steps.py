"""The profiled part of the step window: after the timed steps, ``profile_steps`` steps under torch.profiler
(each torch call tagged with the user's file and line), then ``call_steps`` steps watched for torch.save,
zero_grad, empty_cache and debug APIs."""

from __future__ import annotations

import os
from typing import Any

from advisor.script.window_state import WindowState


class ProfiledSteps:
    def __init__(self, state: WindowState):
        self.state = state
        self.profiler: Any = None
        self.step_range: Any = None
        self.annotator: Any = None
        self.step_name = ""
        self.calls: Any = None  # the CallWatcher of the steps after the profiled ones

    @property
    def busy(self) -> bool:
        """Profiling, or watching the calls after: the window's reading of its steps is settled."""
        return self.profiler is not None or self.calls is not None

    def drop(self) -> None:
        """A profile in progress, left: it profiled forwards that were not the step, or the window ended early."""
        if self.profiler is not None:
            for scope in (self.step_range, self.annotator, self.profiler):
                try:
                    scope.__exit__(None, None, None)
                except RuntimeError:
                    continue  # already left when the window's own step failed
            self.profiler = None  # a partial profile has fewer steps than asked: not kept

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        if torch.autograd.profiler._is_profiler_enabled:  # the script profiles itself: sessions cannot nest
            self.state.write("profile_skipped.json", {"reason": "the script runs its own torch.profiler during the window; "
                                                          "profilers cannot nest, so advisor did not profile it"})
            self.state.profile_steps = 0
            self.watch_calls()
            return

        from advisor.capture.annotate import SourceAnnotator
        from advisor.trace.parse import ANNOTATED_MARKER

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        # no Python frames: the annotator names the user's lines, and frames beside it cost 20x the step
        self.profiler = profile(activities=activities, record_shapes=True, with_stack=False)
        self.profiler.__enter__()
        with record_function(ANNOTATED_MARKER):
            pass
        self.annotator = SourceAnnotator()
        self.annotator.__enter__()
        self.step_name = "ProfilerStep#0"
        self.step_range = record_function(self.step_name)
        self.step_range.__enter__()

    def next_step(self, finished: int) -> None:
        from torch.profiler import record_function

        self.step_range.__exit__(None, None, None)
        if finished < self.state.profile_steps:
            self.step_name = f"ProfilerStep#{finished}"
            self.step_range = record_function(self.step_name)
            self.step_range.__enter__()
            return
        self.annotator.__exit__(None, None, None)
        self.profiler.__exit__(None, None, None)
        from advisor.capture.profile import export_trace

        export_trace(self.profiler, os.path.join(self.state.out, "trace.json.gz"))
        self.profiler = None
        self.watch_calls()

    def restart_step(self) -> None:
        """The step's clock started again (after an evaluation pass): its range is entered again under the same
        name, and the trace's reader keeps the later range of a step named twice."""
        from torch.profiler import record_function

        self.step_range.__exit__(None, None, None)
        self.step_range = record_function(self.step_name)
        self.step_range.__enter__()

    def watch_calls(self) -> None:
        from advisor.capture.calls import CallWatcher

        self.calls = CallWatcher().__enter__()  # a few more steps, watched for torch.save, zero_grad, ...

    def write_calls(self, steps: int) -> None:
        self.calls.__exit__(None, None, None)
        self.state.write("calls.json", {"sites": [site.model_dump() for site in self.calls.sites(self.state.script,
                                                                                                  steps)]})
        self.calls = None

    def stop_calls(self) -> None:
        """The calls watched so far, dropped (the step was not the step after all)."""
        if self.calls is not None:
            self.calls.__exit__(None, None, None)
            self.calls = None
