"""What a verification run of the script adds to its step window (inside the script's process):
identical seeds, the fixes under test injected (``inject.py``), the model found at its first call,
and the first steps' results kept for the numerics check (``first_results.py``)."""

from __future__ import annotations

import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

from advisor.run.kinds import FORWARD

if TYPE_CHECKING:
    from advisor.run.window import StepWindow


class MeasuredRun:
    def __init__(self, window: StepWindow):
        self.window = window
        self.model = window.spec.get("model") or {}  # the audit run's model: class, parameter count
        self.injection = None
        self.results = None

    def prepare(self) -> None:
        """Seed, inject the fixes, and find the model at its first call (its hooks, its first output)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from advisor.rulekit.rule import NotVerifiable
        from advisor.run.first_results import FirstResults
        from advisor.run.inject import Injection, fixed_target, model_matcher, on_first_call

        random.seed(0)
        torch.manual_seed(0)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(0)
        window = self.window
        try:
            self.injection = Injection(*fixed_target({**window.spec, "script": window.script}))
            self.injection.apply_now()
        except NotVerifiable as reason:
            window.write("fix_refused.json", {"reason": str(reason)})
            os._exit(0)
        except Exception as broken:  # noqa: BLE001 - a fix is code too
            window.write("fix_error.json", {"message": f"applying the fix raised {type(broken).__name__}: {broken}"})
            os._exit(0)
        self.results = FirstResults()
        self.results.watch_backward()
        register_optimizer_step_pre_hook(self._before_optimizer_step)
        if self.model:
            on_first_call(model_matcher(self.model), self._model_found)

    def _model_found(self, model: Any) -> None:
        self.injection.enter_switches()
        if self.injection.changes_model:
            self.injection.fix_model(model)
        results = self.results
        called = time.perf_counter()

        def first_output(module, args, output):
            results.record_output(output)
            results.first_forward_s = time.perf_counter() - called  # with the fix: torch.compile's time too
            recorder.remove()
        recorder = model.register_forward_hook(first_output)
        window = self.window
        if window.kind == FORWARD:  # instance hooks: global ones would run inside a compiled forward
            window.hooks = [model.register_forward_pre_hook(window._enter_forward),
                            model.register_forward_hook(window._leave_forward)]

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() != self.window.owner or self.window.done:
            return
        if id(optimizer) not in self.results.stepped and self.injection.changes_optimizer:
            self.injection.fix_optimizer(optimizer)  # before its first step builds any state
        self.results.before_optimizer_step(optimizer)

    def summary(self) -> dict:
        """What the run did: whether the model was fixed, what the graph rewrite changed (window.json)."""
        self.results.save(self.window.out)
        injection = self.injection
        rewrite = injection.rewrite
        return {"model_fixed": injection.model_fixed, "changes_model": injection.changes_model,
                "compiled": injection.candidate.compiled,
                "first_forward_s": self.results.first_forward_s, "changes_loader": injection.changes_loader,
                "loader_options": injection.candidate.loader_options,
                "rewrite_unapplied": rewrite.unapplied() if rewrite is not None else None,
                "rewrite_described": rewrite.described() if rewrite is not None else ""}
