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
step kind and model given, the fixes under test injected (``inject.py``) and its first steps' results kept for
the numerics check (``first_results.py``), or its fixes switched on and off by blocks of steps (``switched.py``).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

from advisor.files import intercept, stop
from advisor.files.gate import GATE
from advisor.files.intercept import suspended
from advisor.run.kinds import FORWARD, MARKER, OPTIMIZER, PROFILER_STEP, RANK
from advisor.script.collector import CollectorWatch
from advisor.script.failures import watch_failures
from advisor.script.inference_calls import InferenceCalls
from advisor.script.logged_steps import StepRecorder
from advisor.script.profiled_steps import ProfiledSteps
from advisor.script.recorded_calls import RecordedCall, kept
from advisor.script.step_contents import StepContents
from advisor.script.stopping import StopRequest
from advisor.script.training_signs import TrainingSigns
from advisor.script.window_end import WindowEnd
from advisor.sources import direct_user_caller

ROUTED_BATCHES = 4  # real batches fed again to a copy of the model to count tokens per expert


def prepare(spec_path: str) -> None:
    """In the script's process (each rank's, under torchrun), from its first line: listen for advisor's
    stop requests, and install the window right after ``import torch`` completes (the script may
    never import it)."""
    from advisor.files.imports import when_imported

    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None and "RANK" in os.environ:
        spec["out_dir"] = os.path.join(spec["out_dir"], f"rank{int(os.environ['RANK'])}")  # a torchrun worker
        spec["rank"] = int(os.environ["RANK"])
        os.makedirs(spec["out_dir"], exist_ok=True)
    stop.listen(spec["out_dir"])
    when_imported("torch", lambda torch: StepWindow(spec).install())


class StepWindow(ProfiledSteps, TrainingSigns, WindowEnd):
    def __init__(self, spec: dict):
        self.out = spec["out_dir"]
        self.warmup = int(spec.get("warmup_steps", 3))
        self.steps = int(spec.get("steps", 20))
        self.profile_steps = int(spec.get("profile_steps", 3))
        self.call_steps = int(spec.get("call_steps", 10))
        self.full = bool(spec.get("full", False))
        self.owner = os.getpid()
        self.count = 0
        self.kind: str | None = None
        self.last: float | None = None
        self.samples_ms: list[float] = []
        self.data_wait_ms: list[float] = []
        self.waiting = 0.0
        self.journal_spent = 0.0  # the file journal's time when the last step ended
        from advisor.machine.conditions import Watch  # made once torch is imported: the bootstrap imports little

        self.machine = Watch()
        self.collector = CollectorWatch()  # the garbage collector's passes inside each step, watched from now
        self.log = StepRecorder()  # every step's time and what happened in it (logged_steps.py)
        self.profiler = None
        self.step_range = None
        self.annotator = None
        self.done = False
        self.depth = 0
        self.script = spec.get("script", "")
        self.marker = spec.get("step_marker") or ""
        self.spec = spec
        self.measure_only = bool(spec.get("measure_only"))  # verification: time the window, nothing else
        self.mode = spec.get("mode") or ""  # "train" | "inference" as the user said (--mode), else from the signs
        self.trains = self.mode == "train"  # forwards are not steps: an optimizer was created (or --mode train)
        self.backward_seen = False
        self.in_backward = 0  # inside torch.autograd.backward: checkpointed layers run their forwards again
        self.optimizer_created = False
        self.contents = StepContents()
        self.parametrizations: tuple[type, ...] = ()  # torch's parametrization modules, once torch is imported
        self.inference = InferenceCalls()  # the model's calls without grad between updates, from the warm-up's end
        self.first_rollout: dict | None = None  # ... before the first step (a rollout comes before any update)
        self.lead_module: int | None = None  # the model: the outermost module with the most parameters
        self.restarts_after_evaluation = 0  # steps whose clock started again when the script left eval mode
        self.evaluating = False  # the script called model.eval() in this step (training_signs.py)
        self.evaluations = 0  # steps not timed for it
        self.step_forwards: dict[int, int] = {}  # outermost module -> forwards with grad in this step
        self.forwards_per_step: dict[int, int] = {}  # ... in the last whole warm-up step (FLOPs of all micro-steps)
        self.marker_watch = None
        if self.marker:
            self.kind = MARKER
        elif self.measure_only and spec.get("kind"):
            self.kind = spec["kind"]  # as the audit run found it: no restarts, no forward hooks unless forwards step
        self.verification = None  # a measure-only run's fixes and first results (measured_run.py)
        self.optimizer_steps: dict[int, int] = {}
        self.lead: int | None = None  # the optimizer whose steps end a step
        self.hooks: list = []
        # id -> [module, calls, first inputs described, the user's call site (a forward with grad's, once one ran),
        #        parameters, whether that site's call ran with grad]
        self.outermost: dict[int, list] = {}
        self.optimizers: dict[int, Any] = {}
        self.optimizer_sites: dict[int, tuple[str, int] | None] = {}  # id -> the user's line that created it
        self.loaders: dict[int, Any] = {}
        self.batches: dict[int, list[RecordedCall]] = {}  # each outermost module's first few calls (graph, routing)
        self.recording: RecordedCall | None = None  # the outermost call running now, when it is recorded
        self.calls = None  # the CallWatcher of the step after the profiled ones
        from advisor.script.ddp import DDPWatcher

        self.ddp = DDPWatcher()  # DistributedDataParallel models, under torchrun
        self.stop = StopRequest(self)  # advisor asking the script to stop (Ctrl-C, a signal, --timeout)

    def install(self) -> None:
        import torch
        from torch.nn.utils.parametrize import ParametrizationList
        from torch.optim.optimizer import register_optimizer_step_post_hook

        from advisor.script.data_wait import watch_loaders
        from advisor.script.training_signs import watch_training_signs
        from advisor.workload.loader_site import watch_loader_sites

        self.parametrizations = (ParametrizationList,)
        register_optimizer_step_post_hook(self._after_optimizer_step)
        watch_training_signs(self)
        self.contents.install(self._model_parameters)
        watch_loader_sites()
        self.ddp.install()
        if not self.measure_only:
            self.log.install()
            if self.full:  # the steps after the window too, to the script's end
                atexit.register(lambda: self.write("steps.json", {"steps": self.log.steps}))
        original_step = torch.profiler.profile.step
        window = self

        def profiler_step(profiler, *args, **kwargs):
            result = original_step(profiler, *args, **kwargs)
            window.boundary(PROFILER_STEP)
            return result
        torch.profiler.profile.step = profiler_step
        if self.measure_only:
            from advisor.script.measured_run import MeasuredRun

            self.verification = MeasuredRun(self)
            self.verification.prepare()
        else:
            # always_call: a forward ended by an exception leaves too (gradient checkpointing stops its recompute
            # by raising), else the depth stays raised and no later call is outermost
            # with_kwargs: the call's keyword arguments are recorded too (a model called as model(**batch))
            self.hooks = [torch.nn.modules.module.register_module_forward_pre_hook(self._enter_forward),
                          torch.nn.modules.module.register_module_forward_hook(self._leave_forward, always_call=True,
                                                                                with_kwargs=True)]
        watch_loaders(self)
        atexit.register(self.on_exit)
        stop.on_request(self.stop.requested)
        watch_failures(self)
        if self.marker:
            self._find_marker()
        self.write("installed.json", {"pid": self.owner})

    def _find_marker(self) -> None:
        from advisor.script.marker import MarkerWatch

        self.marker_watch = MarkerWatch(self, self.marker)
        self.marker_watch.install(lambda: self.boundary(MARKER))

    def _model_parameters(self) -> list:
        entry = self.outermost.get(self.lead_module) if self.lead_module is not None else None
        return list(entry[0].parameters()) if entry is not None else []

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        if os.getpid() != self.owner or (self.verification is not None and self.verification.probing):
            return
        key = id(optimizer)
        self.contents.optimizer_step(optimizer, args, kwargs)
        self.optimizers.setdefault(key, optimizer)
        self.optimizer_steps[key] = self.optimizer_steps.get(key, 0) + 1
        if self.lead is None:
            self.lead = key
        if key == self.lead and self.mode != "inference":  # --mode inference: its forwards are the steps
            self.ddp.after_optimizer_step()
            self.boundary(OPTIMIZER)

    def _choose_lead(self) -> bool:
        """At warm-up's end: the optimizer stepping least often ends a step (a GAN's generator, not
        its critic's several steps). True when that changed: the warm-up then waits for its step."""
        rarest = min(self.optimizer_steps, key=lambda key: (self.optimizer_steps[key], key != self.lead))  # ties: keep
        changed = rarest != self.lead
        self.lead = rarest
        return changed

    def _enter_forward(self, module, args):
        if self.in_backward or isinstance(module, self.parametrizations):
            return  # a parametrized weight computed (weight_norm's, when any code reads the weight): no model call
        if self.depth == 0 and os.getpid() == self.owner:
            import torch

            seen = self.outermost.get(id(module))
            training = torch.is_grad_enabled()
            if seen is None:
                seen = self.outermost[id(module)] = [module, 0, None, direct_user_caller(sys._getframe(1)),
                                                     sum(p.numel() for p in module.parameters()), training]
                self._rank_model(id(module))
            elif training and not seen[5]:  # the training forward's line, not an evaluation's that came first
                seen[3], seen[5] = direct_user_caller(sys._getframe(1)), True
            seen[1] += 1
            if self.count == 0 and not training and self.kind != FORWARD:  # before the first step: a rollout?
                self.inference.enter(args)
            recorded = self.batches.setdefault(id(module), [])
            self.recording = None
            if len(recorded) < ROUTED_BATCHES and self.count <= self.warmup:
                self.recording = RecordedCall(kept(args), {})  # its keyword arguments as the call returns
                recorded.append(self.recording)
        self.depth += 1

    def _rank_model(self, key: int) -> None:
        """The model is the outermost module with the most parameters; a larger one seen later takes over
        (and forwards counted as steps so far were another module's)."""
        size = self.outermost[key][4]
        lead = self.outermost.get(self.lead_module) if self.lead_module is not None else None
        if lead is not None and size <= lead[4]:
            return
        self.lead_module = key
        if lead is not None and self.kind == FORWARD and self.profiler is None and self.calls is None:
            self._restart()

    def _leave_forward(self, module, args, *kwargs_and_output):
        """(module, args, kwargs, output) as a global hook with kwargs; (module, args, output) as an instance hook."""
        if self.in_backward or isinstance(module, self.parametrizations):
            return
        self.depth -= 1
        if self.depth != 0 or os.getpid() != self.owner:
            return
        import torch

        self.inference.leave()  # the outermost call entered above, if it was one without grad before any step
        kwargs = kwargs_and_output[0] if len(kwargs_and_output) == 2 else {}
        if self.recording is not None:
            self.recording.kwargs = kept(kwargs)
            self.recording = None
        entry = self.outermost.get(id(module))
        if entry is not None and entry[2] is None:
            from advisor.workload.feed import describe

            entry[2] = [describe(a) for a in args] + [f"{name}={describe(value)}" for name, value in kwargs.items()]
        if entry is not None and entry[4]:  # a module with parameters (not a loss function's module)
            self.contents.forward(type(module).__name__, torch.is_grad_enabled())
        if torch.is_grad_enabled():
            self.step_forwards[id(module)] = self.step_forwards.get(id(module), 0) + 1
        if self.marker_watch is not None and not self.trains and self.marker_watch.own_step():
            stop.stop_now(0, at_boundary=True)  # the marker matched nothing in the warm-up's worth of forwards
        if self.kind in (None, FORWARD) and not self.trains and id(module) == self.lead_module and entry and entry[4]:
            # inference: each call of the model is a step, until a sign of training; a module with no parameters (an
            # ODE's right-hand side solved before the model is built, a loss) is no model to step by
            self.boundary(FORWARD)

    def boundary(self, kind: str) -> None:
        if os.getpid() != self.owner:
            return
        with suspended():  # advisor's own work between two steps (profiles, its files): not the script's writes
            self._boundary(kind)

    def _boundary(self, kind: str) -> None:
        if self.stop.pending and (self.kind is None or kind == self.kind):
            self.stop.at_step()
        if self.done:
            return self._log_after_window(kind)
        GATE.boundary()
        if self.marker and kind != MARKER:
            if kind == OPTIMIZER and self.marker_watch is not None and self.marker_watch.own_step():
                stop.stop_now(0, at_boundary=True)  # the marker matched nothing in the warm-up's optimizer steps
            return
        if self.kind is not None and RANK[kind] > RANK[self.kind] and self.profiler is None and self.calls is None:
            self._restart()  # e.g. forwards came first (an evaluation pass), but this script trains: count its steps
        if self.kind is None:
            self.kind = kind
        if kind != self.kind:
            return
        self._synchronize()
        now = time.perf_counter()
        if self.count == 0 and self.inference.count:
            self.first_rollout = self.inference.take()  # the model's calls without grad before the first step
        self.log.step_ended(self, now)
        if self.hooks and kind != FORWARD and self.step_forwards:
            self.forwards_per_step = dict(self.step_forwards)
        self.step_forwards.clear()
        if self.evaluating and kind != FORWARD and self.profiler is None and self.calls is None:
            self.evaluating = False  # the step ended in eval mode: it held an evaluation pass, and is not timed
            self.evaluations += 1
            self.contents.restart()
            self.collector.step_ended(timed=False)
            self.waiting, self.last, self.journal_spent = 0.0, self.log.step_started(), getattr(intercept.LAYER, "spent", 0.0)
            return
        self.evaluating = False
        self.count += 1
        self.contents.close_step(len(self.optimizers))
        if self.count == self.warmup and kind == OPTIMIZER and self._choose_lead():
            self.count -= 1
            self.contents.discard_next()  # up to the new lead's next step is part of an iteration, not a whole one
            return
        if not self.measure_only:
            self.collector.trace_step(self.count, self.warmup)  # where a warm-up step's surviving objects are made
        if self.count >= self.warmup:
            self.contents.end_counting()
        if self.count == self.warmup:
            self.ddp.counting = True  # DDP's use is counted over the timed steps
            self.machine.start()  # what else ran on the CPUs while the steps were timed
        if self.count == self.warmup and not self.measure_only and kind != FORWARD:
            self._drop_forward_hooks()  # their graph inputs are recorded; timed steps run without them
            if (lead := self.outermost.get(self.lead_module)) is not None:
                self.inference.watch(lead[0])  # two hooks on the model alone: its calls without grad
        if self.count == 1:
            self.write("progress.json", {"kind": self.kind, "first_step_s": time.monotonic()})
        if self.verification is not None and self.verification.blocks is not None:  # an A/B inside this run
            return self.verification.blocks.at_step_end(self, now)
        timed_end = self.warmup + self.steps
        if self.warmup < self.count <= timed_end and self.last is not None:
            # the step as audit times it: compute, without the wait for the next batch (the data's share)
            # less the time advisor's journal spent keeping copies of the files the step changed (first writes)
            kept = getattr(intercept.LAYER, "spent", 0.0) - self.journal_spent
            self.samples_ms.append((now - self.last - self.waiting - kept) * 1000)
            self.data_wait_ms.append(self.waiting * 1000)
            self.collector.step_ended(timed=True)
        if self.count == timed_end:
            self.machine.stop()
            self.finish(stopped=True) if self.measure_only else self._start_profiler()
        elif timed_end < self.count <= timed_end + self.profile_steps:
            self._next_profiled_step(self.count - timed_end)
        elif self.calls is not None and self.count >= timed_end + self.profile_steps + self.call_steps:
            self._write_calls(self.call_steps)
            self.finish(stopped=not self.full)
        self.waiting, self.journal_spent = 0.0, getattr(intercept.LAYER, "spent", 0.0)
        self.collector.step_ended(timed=False)  # a pass in advisor's own work between steps is no step's
        self.inference.sampler.allowed = not self.warmup <= self.count < timed_end  # the next step is not timed
        self.last = self.log.step_started()

    def _drop_forward_hooks(self) -> None:
        from torch.nn.modules import module

        for hook in self.hooks:
            hook.remove()
            # a global hook's handle forgets its with_kwargs mark: left behind, Dynamo warns of global hooks at
            # every later capture (the graph capture at the window's end among them)
            getattr(module, "_global_forward_hooks_with_kwargs", {}).pop(hook.id, None)
        self.hooks = []
        self.depth = 0

    def _restart(self) -> None:
        self._drop_profile()  # it profiled forwards that were not the step
        if self.calls is not None:
            self.calls.__exit__(None, None, None)
            self.calls = None
        self.ddp.reset()
        self.count, self.last, self.kind = 0, None, None
        if not self.contents.counting:  # forwards taken for steps had ended the warm-up's reading: read it again
            self.contents.install(self._model_parameters)
            self.contents.counting = True
        self.contents.restart()
        self.samples_ms.clear()
        self.data_wait_ms.clear()
        self.collector.restart()

    def _synchronize(self) -> None:
        torch = sys.modules["torch"]  # imported: the window is made once it is
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
