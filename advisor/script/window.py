"""The step window, inside the script's process: step boundaries, timing, profiling, data wait.

A step ends at each optimizer step (torch's global optimizer step post hook; with several
optimizers, at the steps of the one that steps least often during warm-up, so a step is one
whole iteration); in a script that creates no optimizer but runs backwards (it updates its
parameters by hand), at each backward; in a script that does neither (``training_signs.py``), at
each call of the model: the outermost module with the most parameters (a loss module called beside
it is not a step). In a script that creates an optimizer, forwards are never steps: the window
waits for the first optimizer step (an evaluation pass or long gradient accumulation first). An
evaluation inside a step (the model switched to eval mode) is not the step's: when the script
switches back to train mode the step's clock (and its profiled range) starts again; a step that
never switched back is not timed. ``--mode`` decides instead of the signs. What each step
contained is read during the warm-up (``step_contents.py``) and reported with how it was
recognised. After ``warmup`` steps, ``steps`` steps are timed profiler-free, then
``profile_steps`` more are profiled (timing and profiling never mixed). Every step, from the first to the window's
end (to the script's under ``--full``), is logged with what was in it (``logged_steps.py``). The results go to the
spec's folder; the script is then stopped unless ``full``.

A verification run (``measure_only``) times the window and nothing else: seeded alike, with the audit run's
step kind and model given, the fixes under test injected (``verify/inject.py``) and its first steps' results kept
for the numerics check (``verify/first_results.py``), or its fixes switched on and off by blocks of steps
(``verify/switched.py``); ``measured_run.py`` hooks them in.

The window's state is one record (``window_state.py``); each watcher gets it and the callbacks it needs.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any

from advisor.files import intercept, stop
from advisor.files.gate import GATE
from advisor.files.intercept import suspended
from advisor.run.kinds import FORWARD, MARKER, OPTIMIZER, PROFILER_STEP, RANK
from advisor.run.window_spec import WindowSpec
from advisor.script.failures import watch_failures
from advisor.script.profiled_steps import ProfiledSteps
from advisor.script.recorded_calls import RecordedCall, kept
from advisor.script.stopping import StopRequest
from advisor.script.training_signs import TrainingSigns
from advisor.script.window_end import WindowEnd
from advisor.script.window_state import ModuleSeen, WindowState
from advisor.sources import direct_user_caller

ROUTED_BATCHES = 4  # real batches fed again to a copy of the model to count tokens per expert


def prepare(spec_path: str) -> None:
    """In the script's process (each rank's, under torchrun), from its first line: listen for advisor's
    stop requests, and install the window right after ``import torch`` completes (the script may
    never import it)."""
    from advisor.files.imports import when_imported
    from advisor.run.window_spec import read_window_spec

    spec = read_window_spec(spec_path)
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None and "RANK" in os.environ:  # a torchrun worker
        rank = int(os.environ["RANK"])
        spec = spec.model_copy(update={"out_dir": os.path.join(spec.out_dir, f"rank{rank}"), "rank": rank})
        os.makedirs(spec.out_dir, exist_ok=True)
    stop.listen(spec.out_dir)
    when_imported("torch", lambda torch: StepWindow(spec).install())


class StepWindow:
    """Step boundaries and their timing; the state it keeps is ``self.state``, shared with its watchers."""

    def __init__(self, spec: WindowSpec):
        self.state = state = WindowState.from_spec(spec)
        if state.marker:
            state.kind = MARKER
        elif state.measure_only and spec.kind:
            state.kind = spec.kind  # as the audit run found it: no restarts, no forward hooks unless forwards step
        self.hooks: list = []  # the forward hooks that find the model and record its calls, during the warm-up
        self.profiled = ProfiledSteps(state)
        self.signs = TrainingSigns(state, self.boundary, self._restart, self.profiled.restart_step)
        self.marker_watch = None
        if state.marker:
            from advisor.script.marker import MarkerWatch

            self.marker_watch = MarkerWatch(state, state.marker)
        self.verification = None  # a measure-only run's fixes and first results (measured_run.py)
        if state.measure_only:
            from advisor.script.measured_run import MeasuredRun

            self.verification = MeasuredRun(state, self.hook_model_forwards)
        self.end = WindowEnd(state, self.profiled, self._drop_forward_hooks, self.verification, self.marker_watch)
        self.stop = StopRequest(self.end)  # advisor asking the script to stop (Ctrl-C, a signal, --timeout)

    def install(self) -> None:
        import torch
        from torch.nn.utils.parametrize import ParametrizationList
        from torch.optim.optimizer import register_optimizer_step_post_hook

        from advisor.script.data_wait import watch_loaders
        from advisor.workload.loader_site import watch_loader_sites

        state = self.state
        state.parametrizations = (ParametrizationList,)
        register_optimizer_step_post_hook(self._after_optimizer_step)
        self.signs.install(lambda: self.profiled.profiler is not None)
        state.contents.install(self._model_parameters)
        watch_loader_sites()
        state.ddp.install()
        if not state.measure_only:
            state.log.install()
            if state.full:  # the steps after the window too, to the script's end
                atexit.register(lambda: state.write("steps.json", {"steps": state.log.steps}))
        original_step = torch.profiler.profile.step
        window = self

        def profiler_step(profiler, *args, **kwargs):
            result = original_step(profiler, *args, **kwargs)
            window.boundary(PROFILER_STEP)
            return result
        torch.profiler.profile.step = profiler_step
        if self.verification is not None:
            self.verification.prepare()
        else:
            # always_call: a forward ended by an exception leaves too (gradient checkpointing stops its recompute
            # by raising), else the depth stays raised and no later call is outermost
            # with_kwargs: the call's keyword arguments are recorded too (a model called as model(**batch))
            self.hooks = [torch.nn.modules.module.register_module_forward_pre_hook(self.enter_forward),
                          torch.nn.modules.module.register_module_forward_hook(self.leave_forward, always_call=True,
                                                                                with_kwargs=True)]
        watch_loaders(state)
        atexit.register(self.end.on_exit)
        stop.on_request(self.stop.requested)
        watch_failures(state, self.end.on_exit)
        if self.marker_watch is not None:
            self.marker_watch.install(lambda: self.boundary(MARKER))
        state.write("installed.json", {"pid": state.owner})

    def hook_model_forwards(self, model: Any) -> None:
        """Hooks on the model's own calls (a verification run whose steps are its calls): global hooks would run
        inside a compiled forward."""
        self.hooks = [model.register_forward_pre_hook(self.enter_forward),
                      model.register_forward_hook(self.leave_forward)]

    def _model_parameters(self) -> list:
        seen = self.state.lead_seen()
        return list(seen.module.parameters()) if seen is not None else []

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        state = self.state
        if not state.mine or (self.verification is not None and self.verification.probing):
            return
        key = id(optimizer)
        state.contents.optimizer_step(optimizer, args, kwargs)
        state.optimizers.setdefault(key, optimizer)
        state.optimizer_steps[key] = state.optimizer_steps.get(key, 0) + 1
        if state.lead is None:
            state.lead = key
        if key == state.lead and state.mode != "inference":  # --mode inference: its forwards are the steps
            state.ddp.after_optimizer_step()
            self.boundary(OPTIMIZER)

    def _choose_lead(self) -> bool:
        """At warm-up's end: the optimizer stepping least often ends a step (a GAN's generator, not
        its critic's several steps). True when that changed: the warm-up then waits for its step."""
        state = self.state
        rarest = min(state.optimizer_steps, key=lambda key: (state.optimizer_steps[key], key != state.lead))  # ties
        changed = rarest != state.lead
        state.lead = rarest
        return changed

    def enter_forward(self, module, args):
        state = self.state
        if state.in_backward or isinstance(module, state.parametrizations):
            return  # a parametrized weight computed (weight_norm's, when any code reads the weight): no model call
        if state.depth == 0 and state.mine:
            import torch

            seen = state.outermost.get(id(module))
            training = torch.is_grad_enabled()
            if seen is None:
                seen = state.outermost[id(module)] = ModuleSeen(
                    module, sum(p.numel() for p in module.parameters()), direct_user_caller(sys._getframe(1)), training)
                self._rank_model(id(module))
            elif training and not seen.site_with_grad:  # the training forward's line, not an evaluation's first
                seen.site, seen.site_with_grad = direct_user_caller(sys._getframe(1)), True
            seen.calls += 1
            if state.count == 0 and not training and state.kind != FORWARD:  # before the first step: a rollout?
                state.inference.enter(args)
            recorded = state.batches.setdefault(id(module), [])
            state.recording = None
            if len(recorded) < ROUTED_BATCHES and state.count <= state.warmup:
                state.recording = RecordedCall(kept(args), {})  # its keyword arguments as the call returns
                recorded.append(state.recording)
        state.depth += 1

    def _rank_model(self, key: int) -> None:
        """The model is the outermost module with the most parameters; a larger one seen later takes over
        (and forwards counted as steps so far were another module's)."""
        state = self.state
        size = state.outermost[key].parameters
        lead = state.lead_seen()
        if lead is not None and size <= lead.parameters:
            return
        state.lead_module = key
        if lead is not None and state.kind == FORWARD and not self.profiled.busy:
            self._restart()

    def leave_forward(self, module, args, *kwargs_and_output):
        """(module, args, kwargs, output) as a global hook with kwargs; (module, args, output) as an instance hook."""
        state = self.state
        if state.in_backward or isinstance(module, state.parametrizations):
            return
        state.depth -= 1
        if state.depth != 0 or not state.mine:
            return
        import torch

        state.inference.leave()  # the outermost call entered above, if it was one without grad before any step
        kwargs = kwargs_and_output[0] if len(kwargs_and_output) == 2 else {}
        if state.recording is not None:
            state.recording.kwargs = kept(kwargs)
            state.recording = None
        seen = state.outermost.get(id(module))
        if seen is not None and seen.inputs is None:
            from advisor.workload.feed import describe

            seen.inputs = [describe(a) for a in args] + [f"{name}={describe(value)}" for name, value in kwargs.items()]
        if seen is not None and seen.parameters:  # a module with parameters (not a loss function's module)
            state.contents.forward(type(module).__name__, torch.is_grad_enabled())
        if torch.is_grad_enabled():
            state.step_forwards[id(module)] = state.step_forwards.get(id(module), 0) + 1
        if self.marker_watch is not None and not state.trains and self.marker_watch.own_step():
            stop.stop_now(0, at_boundary=True)  # the marker matched nothing in the warm-up's worth of forwards
        if state.kind in (None, FORWARD) and not state.trains and id(module) == state.lead_module and seen \
                and seen.parameters:
            # inference: each call of the model is a step, until a sign of training; a module with no parameters (an
            # ODE's right-hand side solved before the model is built, a loss) is no model to step by
            self.boundary(FORWARD)

    def boundary(self, kind: str) -> None:
        if not self.state.mine:
            return
        with suspended():  # advisor's own work between two steps (profiles, its files): not the script's writes
            self._boundary(kind)

    def _boundary(self, kind: str) -> None:
        state, profiled = self.state, self.profiled
        if self.stop.pending and (state.kind is None or kind == state.kind):
            self.stop.at_step()
        if state.done:
            return self.end.log_after_window(kind)
        GATE.boundary()
        if state.marker and kind != MARKER:
            if kind == OPTIMIZER and self.marker_watch is not None and self.marker_watch.own_step():
                stop.stop_now(0, at_boundary=True)  # the marker matched nothing in the warm-up's optimizer steps
            return
        if state.kind is not None and RANK[kind] > RANK[state.kind] and not profiled.busy:
            self._restart()  # e.g. forwards came first (an evaluation pass), but this script trains: count its steps
        if state.kind is None:
            state.kind = kind
        if kind != state.kind:
            return
        self._synchronize()
        now = time.perf_counter()
        if state.count == 0 and state.inference.count:
            state.first_rollout = state.inference.take()  # the model's calls without grad before the first step
        state.log.step_ended(state, now)
        if self.hooks and kind != FORWARD and state.step_forwards:
            state.forwards_per_step = dict(state.step_forwards)
        state.step_forwards.clear()
        if state.evaluating and kind != FORWARD and not profiled.busy:
            state.evaluating = False  # the step ended in eval mode: it held an evaluation pass, and is not timed
            state.evaluations += 1
            state.contents.restart()
            state.collector.step_ended(timed=False)
            state.waiting, state.last = 0.0, state.log.step_started()
            state.journal_spent = getattr(intercept.LAYER, "spent", 0.0)
            return
        state.evaluating = False
        state.count += 1
        state.contents.close_step(len(state.optimizers))
        if state.count == state.warmup and kind == OPTIMIZER and self._choose_lead():
            state.count -= 1
            state.contents.discard_next()  # up to the new lead's next step is part of an iteration, not a whole one
            return
        if not state.measure_only:
            state.collector.trace_step(state.count, state.warmup)  # where a warm-up step's surviving objects are made
        if state.count >= state.warmup:
            state.contents.end_counting()
        if state.count == state.warmup:
            state.ddp.counting = True  # DDP's use is counted over the timed steps
            state.machine.start()  # what else ran on the CPUs while the steps were timed
        if state.count == state.warmup and not state.measure_only and kind != FORWARD:
            self._drop_forward_hooks()  # their graph inputs are recorded; timed steps run without them
            if (lead := state.lead_seen()) is not None:
                state.inference.watch(lead.module)  # two hooks on the model alone: its calls without grad
        if state.count == 1:
            state.write("progress.json", {"kind": state.kind, "first_step_s": time.monotonic()})
        if self.verification is not None and self.verification.blocks is not None:  # an A/B inside this run
            return self.verification.blocks.at_step_end(state, now, lambda: self.end.finish(stopped=True))
        timed_end = state.warmup + state.steps
        if state.warmup < state.count <= timed_end and state.last is not None:
            # the step as audit times it: compute, without the wait for the next batch (the data's share)
            # less the time advisor's journal spent keeping copies of the files the step changed (first writes)
            copies = getattr(intercept.LAYER, "spent", 0.0) - state.journal_spent
            state.samples_ms.append((now - state.last - state.waiting - copies) * 1000)
            state.data_wait_ms.append(state.waiting * 1000)
            state.collector.step_ended(timed=True)
        if state.count == timed_end:
            state.machine.stop()
            self.end.finish(stopped=True) if state.measure_only else profiled.start()
        elif timed_end < state.count <= timed_end + state.profile_steps:
            profiled.next_step(state.count - timed_end)
        elif profiled.calls is not None and state.count >= timed_end + state.profile_steps + state.call_steps:
            profiled.write_calls(state.call_steps)
            self.end.finish(stopped=not state.full)
        state.waiting, state.journal_spent = 0.0, getattr(intercept.LAYER, "spent", 0.0)
        state.collector.step_ended(timed=False)  # a pass in advisor's own work between steps is no step's
        state.inference.sampler.allowed = not state.warmup <= state.count < timed_end  # the next step is not timed
        state.last = state.log.step_started()

    def _drop_forward_hooks(self) -> None:
        from torch.nn.modules import module

        for hook in self.hooks:
            hook.remove()
            # a global hook's handle forgets its with_kwargs mark: left behind, Dynamo warns of global hooks at
            # every later capture (the graph capture at the window's end among them)
            getattr(module, "_global_forward_hooks_with_kwargs", {}).pop(hook.id, None)
        self.hooks = []
        self.state.depth = 0

    def _restart(self) -> None:
        state = self.state
        self.profiled.drop()  # it profiled forwards that were not the step
        self.profiled.stop_calls()
        state.ddp.reset()
        state.count, state.last, state.kind = 0, None, None
        if not state.contents.counting:  # forwards taken for steps had ended the warm-up's reading: read it again
            state.contents.install(self._model_parameters)
            state.contents.counting = True
        state.contents.restart()
        state.samples_ms.clear()
        state.data_wait_ms.clear()
        state.collector.restart()

    def _synchronize(self) -> None:
        torch = sys.modules["torch"]  # imported: the window is made once it is
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
