"""The profiled part of the step window: after the timed steps, ``profile_steps`` steps under torch.profiler
(each torch call tagged with the user's file and line), then ``call_steps`` steps watched for torch.save,
zero_grad, empty_cache and debug APIs. A mixin of ``StepWindow``: it reads and sets the window's state."""

from __future__ import annotations

import os


class ProfiledSteps:
    def _drop_profile(self) -> None:
        if self.profiler is not None:
            for scope in (self.step_range, self.annotator, self.profiler):
                try:
                    scope.__exit__(None, None, None)
                except RuntimeError:
                    continue  # already left when the window's own step failed
            self.profiler = None  # a partial profile has fewer steps than asked: not kept

    def _start_profiler(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        if torch.autograd.profiler._is_profiler_enabled:  # the script profiles itself: sessions cannot nest
            self.write("profile_skipped.json", {"reason": "the script runs its own torch.profiler during the window; "
                                                          "profilers cannot nest, so advisor did not profile it"})
            self.profile_steps = 0
            self._watch_calls()
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

    def _next_profiled_step(self, finished: int) -> None:
        from torch.profiler import record_function

        self.step_range.__exit__(None, None, None)
        if finished < self.profile_steps:
            self.step_name = f"ProfilerStep#{finished}"
            self.step_range = record_function(self.step_name)
            self.step_range.__enter__()
            return
        self.annotator.__exit__(None, None, None)
        self.profiler.__exit__(None, None, None)
        from advisor.capture.profile import export_trace

        export_trace(self.profiler, os.path.join(self.out, "trace.json.gz"))
        self.profiler = None
        self._watch_calls()

    def _restart_profiled_step(self) -> None:
        """The step's clock started again (after an evaluation pass): its range is entered again under the same
        name, and the trace's reader keeps the later range of a step named twice."""
        from torch.profiler import record_function

        self.step_range.__exit__(None, None, None)
        self.step_range = record_function(self.step_name)
        self.step_range.__enter__()

    def _watch_calls(self) -> None:
        from advisor.capture.calls import CallWatcher

        self.calls = CallWatcher().__enter__()  # a few more steps, watched for torch.save, zero_grad, ...

    def _write_calls(self, steps: int) -> None:
        self.calls.__exit__(None, None, None)
        self.write("calls.json", {"sites": [site.model_dump() for site in self.calls.sites(self.script, steps)]})
        self.calls = None
