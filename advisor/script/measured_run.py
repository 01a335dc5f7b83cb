"""What a verification run of the script adds to its step window (inside the script's process):
identical seeds, the fixes under test injected (``verify/inject.py``), the model found at its first call,
and the first steps' results kept for the numerics check (``verify/first_results.py``)."""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any, Callable

from advisor.run.kinds import FORWARD
from advisor.script.window_state import WindowState


class MeasuredRun:
    def __init__(self, state: WindowState, hook_forwards: Callable[[Any], None]):
        """``hook_forwards(model)``: the window's hooks on the model's own calls, where its calls are the steps."""
        self.state = state
        self.hook_forwards = hook_forwards
        self.model = state.spec.model  # the audit run's model: class, parameter count
        self.injection = None
        self.results = None
        self.switch = None  # an A/B inside this run (switched.py): the fix on and off by blocks of steps
        self.blocks = None
        self.handles: list = []  # the optimizer hooks it registered

    def prepare(self) -> None:
        """Seed, inject the fixes, and find the model at its first call (its hooks, its first output)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from advisor.rulekit.rule import NotVerifiable
        from advisor.verify.first_results import FirstResults
        from advisor.verify.inject import Injection, fixed_target, model_matcher, on_first_call

        state = self.state
        in_training = state.spec.in_training
        if not in_training:  # a run of advisor's own: seeded alike (a user's training keeps its own random state)
            random.seed(0)
            torch.manual_seed(0)
            if "numpy" in sys.modules:
                sys.modules["numpy"].random.seed(0)
        switched = state.spec.switched
        try:
            self.injection = Injection(*fixed_target(state.spec))
            self.injection.apply_now(switched=bool(switched))
        except NotVerifiable as reason:
            state.write("fix_refused.json", {"reason": str(reason)})
            return self._give_up(in_training)
        except Exception as broken:  # noqa: BLE001 - a fix is code too
            state.write("fix_error.json", {"message": f"applying the fix raised {type(broken).__name__}: {broken}"})
            return self._give_up(in_training)
        if switched:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            from advisor.script.failures import distributed
            from advisor.verify.switched import Blocks, Switch

            self.switch = Switch(self.injection, forgiving=in_training)
            self.blocks = Blocks(self.switch, switched, distributed)
            self.handles = [
                register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: self.switch.before_optimizer_step(
                    optimizer, args, kwargs)),
                register_optimizer_step_post_hook(
                    lambda optimizer, args, kwargs: self.switch.probe.after_optimizer_step())]
        else:
            self.results = FirstResults()
            self.results.watch_backward()
            self.handles = [register_optimizer_step_pre_hook(self._before_optimizer_step)]
        if self.model is not None:
            on_first_call(model_matcher(self.model), self._model_found)

    def _give_up(self, in_training: bool) -> None:
        """The fix could not be applied (said in the window's folder): a run of advisor's own ends here; in a user's
        training the window ends, and the training goes on."""
        if not in_training:
            os._exit(0)
        self.state.done = True

    def withdraw(self) -> None:
        """In a user's training, once the blocks are done: the fix off and every change the switch made taken back
        (the model's forward, the optimizers' options, the flags, the loaders), its hooks removed."""
        if self.switch is not None:
            self.switch.withdraw()
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _model_found(self, model: Any) -> None:
        if self.switch is not None:
            if self.injection.changes_model or self.injection.candidate.step_contexts:  # flags change the forward too
                self.switch.model_found(model)
            self._hook_forwards(model)
            return
        self.injection.enter_switches()
        if self.injection.changes_model:
            self.injection.fix_model(model)
        from advisor.workload.autocast import watch_precision

        results = self.results
        # the precision its first call computes in, read in a run without a change to the model (hooks inside a
        # compiled forward would be compiled with it)
        seen, stop_watching = watch_precision(model) if not self.injection.changes_model else ([], lambda: None)
        called = time.perf_counter()

        def first_output(module, args, output):
            results.record_output(output)
            stop_watching()
            results.precision = seen[0] if seen else None
            results.first_forward_s = time.perf_counter() - called  # with the fix: torch.compile's time too
            recorder.remove()
        recorder = model.register_forward_hook(first_output)
        self._hook_forwards(model)

    def _hook_forwards(self, model: Any) -> None:
        if self.state.kind == FORWARD:  # instance hooks: global ones would run inside a compiled forward
            self.hook_forwards(model)

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.state.mine or self.state.done:
            return
        if id(optimizer) not in self.results.stepped and self.injection.changes_optimizer:
            self.injection.fix_optimizer(optimizer)  # before its first step builds any state
        self.results.before_optimizer_step(optimizer)

    @property
    def probing(self) -> bool:
        """The numerics probe's own optimizer step is running: it is not a step of the script's."""
        return self.switch is not None and self.switch.probe.inside

    def summary(self) -> dict:
        """What the run did: whether the model was fixed, what the graph rewrite changed (window.json)."""
        injection = self.injection
        if self.switch is not None:
            self.switch.probe.save(self.state.out)
        else:
            self.results.save(self.state.out)
        rewrite = injection.rewrite
        return {"model_fixed": injection.model_fixed, "changes_model": injection.changes_model,
                "compiled": injection.candidate.compiled,
                "first_forward_s": self.results.first_forward_s if self.results is not None else None,
                "first_fixed_extra_s": self.switch.probe.first_fixed_extra_s if self.switch is not None else None,
                "changes_loader": injection.changes_loader,
                "loader_options": injection.candidate.loader_options,
                "rewrite_unapplied": rewrite.unapplied() if rewrite is not None else None,
                "rewrite_described": rewrite.described() if rewrite is not None else "",
                "blocks": self.blocks.summary() if self.blocks is not None else None,
                "switch_failed": self.switch.failed if self.switch is not None else ""}
