"""A/B inside one run of the script: the script as it is and with a fix, alternating by blocks of steps.

Where a fix can be switched between two steps (the model's forward swapped for its fixed version:
torch.compile, a graph rewrite, autocast; the optimizer's options: foreach, fused; a library flag; the
loader's settings: a twin DataLoader on the same dataset and sampler serves the batches while the fix is on), a
verification run (an experiment, in a shadow like every other) runs the script once and switches the fix
on and off at step boundaries, so the pairs are many and carry no noise between processes.

The schedule, after the window's warm-up steps: one block with the fix on, not timed (torch.compile
compiles there, and the numerics probe runs at its first step); then pairs of blocks, the order alternating
(fix-less first, then fix first: a drift through the run cancels within two pairs). The first step of each
block, the one after the switch, is not timed (with a loader switched, neither are those its workers' queue
serves from batches made while the other arm ran; a step is then timed with its wait for data). A pair gives
the two blocks' median step times. The run ends itself at a step's end once its pairs decide a verdict, at
the parent's deadline or at the most pairs; under
torchrun every rank runs exactly the most pairs, so all ranks stop at the same step.

Numerics, at the first step with the fix on: the model's forward runs on the same arguments as the script
has it and with the fix (the random state and the buffers put back after each), comparing in training the
mean of its outputs and every gradient of it (a loss and its gradients, as a model file's step is compared),
else its outputs; the optimizer's step is taken with the script's options from the same state and then, the
state put back, with the fix's. The values go to the parent, which compares them with the rule's tolerance.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from advisor.run.window_spec import BlocksSpec
from advisor.verify.inject import Injection
from advisor.verify.measure import ABResult, verdict

FILE = "switched_numerics.pt"
LEAST_PAIRS = 6  # before a run may end itself on a verdict
_save = torch.save  # taken before any fix silences the script's saves


@dataclass
class Probe:
    """The values of one forward and one optimizer step, as the script has them and with the fix."""

    reference: list[torch.Tensor] = field(default_factory=list)
    candidate: list[torch.Tensor] = field(default_factory=list)
    what: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # what could not be compared, and why
    forward_pending: bool = False
    optimizer_pending: bool = False
    inside: bool = False  # the probe's own optimizer step: the window does not count it
    expected_parameters: list[torch.Tensor] | None = None
    parameters: list[torch.Tensor] = field(default_factory=list)
    first_fixed_extra_s: float | None = None  # the fixed forward's first call over the script's: torch.compile's time
    precision: str | None = None  # the reduced precision the script's forward computes in (autocast, its weights)

    def forward(self, model: torch.nn.Module, original: Callable, fixed: Callable, switch: Switch,
                args: tuple, kwargs: dict) -> Any:
        """The forward as the script has it and with the fix, on the same arguments; in training also the
        gradients of their outputs' mean (the script's loss is not known here). Both are the probe's own:
        their random draws and buffer updates are put back, and the script's forward runs after them."""
        from advisor.workload.autocast import watch_precision

        self.forward_pending = False
        parameters = [p for p in model.parameters() if p.requires_grad] if torch.is_grad_enabled() else []
        switch.flags(False)  # the reference as the script has it: its own flags too
        began = time.perf_counter()
        seen, stop_watching = watch_precision(model)
        try:
            self.reference += self._probed(model, original, args, kwargs, parameters)
        finally:
            stop_watching()
        self.precision = seen[0] if seen else None
        switch.flags(True)
        middle = time.perf_counter()
        self.candidate += self._probed(model, fixed, args, kwargs, parameters)
        self.first_fixed_extra_s = max(0.0, (time.perf_counter() - middle) - (middle - began))
        self.what.append(("the mean of the model's outputs and its gradients" if parameters else "the model's outputs")
                         + " on the same batch")
        return fixed(*args, **kwargs)

    def _probed(self, model: torch.nn.Module, forward: Callable, args: tuple, kwargs: dict,
                parameters: list[torch.Tensor]) -> list[torch.Tensor]:
        buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):  # the draws are given back: the next forward draws the same
            values = self._values(forward(*args, **kwargs), parameters)
        with torch.no_grad():
            for buffer, kept in buffers:  # batch norm's running statistics: this forward was not the script's
                buffer.copy_(kept)
        return values

    @staticmethod
    def _values(output: Any, parameters: list[torch.Tensor]) -> list[torch.Tensor]:
        """In training, as the model-file verification compares a step: a loss (here the outputs' mean, the
        script's own loss not being known) and every parameter's gradient of it; else the outputs."""
        from torch.utils._pytree import tree_flatten

        tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)]
        differentiable = [t for t in tensors if t.requires_grad and t.is_floating_point()]
        if not parameters or not differentiable:
            return [t.detach().clone().cpu() for t in tensors]
        loss = sum(t.float().mean() for t in differentiable)
        gradients = torch.autograd.grad(loss, parameters, allow_unused=True)
        return [loss.detach().cpu().reshape(1)] + [torch.zeros(p.shape) if g is None else g.detach().clone().cpu()
                                                   for p, g in zip(parameters, gradients)]

    def optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict, switch: Switch) -> None:
        """Before the first step with the fix: the step as the script has it, from the same state, then put back."""
        self.optimizer_pending = False
        if len(args) > 1 or kwargs.get("closure") is not None:  # args[0]: the optimizer itself (torch's wrapper)
            self.skipped.append("the optimizer step was not compared (it is called with a closure, which would "
                                "run the model again)")
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        kept = [p.detach().clone() for p in parameters]
        state = {p: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in optimizer.state[p].items()}
                 for p in parameters if p in optimizer.state}
        switch.options(optimizer, False)
        self.inside = True
        try:
            optimizer.step()
        finally:
            self.inside = False
        self.expected_parameters = [p.detach().clone().cpu() for p in parameters]
        with torch.no_grad():
            for p, value in zip(parameters, kept):
                p.copy_(value)
        for p in parameters:
            if p in state:
                optimizer.state[p] = state[p]
            else:
                optimizer.state.pop(p, None)
        switch.options(optimizer, True)
        self.parameters = parameters

    def after_optimizer_step(self) -> None:
        if self.expected_parameters is None or not self.parameters:
            return
        self.reference += self.expected_parameters
        self.candidate += [p.detach().clone().cpu() for p in self.parameters]
        self.what.append("the parameters after one optimizer step from the same state")
        self.expected_parameters, self.parameters = None, []

    def save(self, folder: str) -> None:
        _save({"reference": self.reference, "candidate": self.candidate, "what": self.what, "skipped": self.skipped,
               "precision": self.precision}, os.path.join(folder, FILE))


def load(folder: str) -> dict | None:
    path = os.path.join(folder, FILE)
    return torch.load(path, weights_only=True) if os.path.exists(path) else None


class Switch:
    """The fix's switchable parts, on or off between steps: the model's forward, the optimizers' options,
    the fix's flags."""

    def __init__(self, injection: Injection):
        self.injection = injection
        self.on = False
        self.own_options: dict[int, tuple[Any, list[dict]]] = {}  # optimizer id -> (it, each group's own options)
        self.probe = Probe()
        self.twins: dict[int, Any] = {}  # a loader's id -> its twin with the fix's settings
        self.queue_depth = 0  # the most batches any loader's workers hold ready (prefetched while its arm is off)
        if injection.changes_loader:
            self._switch_loaders()

    def _switch_loaders(self) -> None:
        """Each DataLoader the script iterates yields from its own iterator while the fix is off, and from its
        twin's (the same dataset and sampling, the fix's settings) while it is on; the epoch ends after as many
        batches as the script's loader has."""
        from torch.utils.data import DataLoader

        from advisor.workload.target import rebuild_loader

        own_iter = DataLoader.__iter__
        switch, options = self, self.injection.candidate.loader_options
        twin_ids: set[int] = set()

        def switched_iter(loader):
            if id(loader) in twin_ids:
                return own_iter(loader)
            twin = switch.twins.get(id(loader))
            if twin is None:
                twin = switch.twins[id(loader)] = rebuild_loader(loader, **options)
                twin_ids.add(id(twin))
                switch.queue_depth = max(switch.queue_depth, _queue_depth(loader), _queue_depth(twin))
            return SwitchedBatches(own_iter(loader), lambda: own_iter(twin), switch, _length(loader))
        DataLoader.__iter__ = switched_iter

    @property
    def with_data(self) -> bool:
        """A loader's fix: a step is timed with its wait for data."""
        return self.injection.changes_loader

    def model_found(self, model: torch.nn.Module) -> None:
        original = model.forward
        fixed = self.injection.fixed_forward(model)
        switch, probe = self, self.probe

        def switched(*args, **kwargs):
            if not switch.on:
                return original(*args, **kwargs)
            if probe.forward_pending:
                return probe.forward(model, original, fixed, switch, args, kwargs)
            return fixed(*args, **kwargs)
        model.forward = switched
        self.injection.model_fixed = True

    def before_optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.probe.inside:
            return
        wanted = self.injection.candidate.optimizer_options
        if wanted and id(optimizer) not in self.own_options:
            own = [{key: group.get(key) for key in wanted} for group in optimizer.param_groups]
            self.own_options[id(optimizer)] = (optimizer, own)
            self.options(optimizer, self.on)
        if wanted and self.on and self.probe.optimizer_pending:
            self.probe.optimizer_step(optimizer, args, kwargs, self)

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        self.on = on
        if on:
            self.probe.forward_pending = self.probe.optimizer_pending = not self.probe.what and not self.probe.skipped
        self.flags(on)
        for optimizer, _ in self.own_options.values():
            self.options(optimizer, on)

    def flags(self, on: bool) -> None:
        """The fix's flags and silenced calls entered (the injection's own), or left: the script's back."""
        if on:
            self.injection.enter_switches()
        else:
            self.injection.switches.close()

    def options(self, optimizer: Any, on: bool) -> None:
        """The fix's options on every group, or the script's own back; a step counter follows (a fused
        optimizer keeps it on the parameter's device, the others on the CPU)."""
        known = self.own_options.get(id(optimizer))
        if known is None:
            return
        for group, own in zip(optimizer.param_groups, known[1]):
            group.update(self.injection.candidate.optimizer_options if on else own)
            on_device = bool(group.get("fused") or group.get("capturable"))
            for p in group["params"]:
                step = optimizer.state.get(p, {}).get("step")
                if isinstance(step, torch.Tensor):
                    optimizer.state[p]["step"] = step.to(p.device if on_device else "cpu")


class SwitchedBatches:
    """The iterator the script gets from a loader: its batches come from the arm that is on."""

    def __init__(self, own: Any, make_twin: Callable[[], Any], switch: Switch, length: int | None):
        self.iterators = {False: own, True: None}
        self.make_twin = make_twin
        self.switch = switch
        self.left = length

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return self.left if self.left is not None else 0

    def __next__(self):
        if self.left is not None and self.left <= 0:
            raise StopIteration
        arm = self.switch.on
        if self.iterators[arm] is None:
            self.iterators[arm] = self.make_twin()
        batch = next(self.iterators[arm])
        if self.left is not None:
            self.left -= 1
        return batch


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset without a length: each arm's stream ends the epoch
        return None


def _queue_depth(loader: Any) -> int:
    return loader.num_workers * (loader.prefetch_factor or 2) if loader.num_workers else 0


@dataclass
class Block:
    fix: bool
    timed: bool
    steps_ms: list[float] = field(default_factory=list)
    seen: int = 0


class Blocks:
    """The schedule of one switched run: which arm each step runs in, and the pairs of blocks timed."""

    def __init__(self, switch: Switch, spec: BlocksSpec, distributed: Callable[[], bool]):
        self.switch = switch
        self.steps = spec.block  # timed steps per block (one more runs first, after the switch)
        self.most_pairs = spec.most_pairs
        self.exact = spec.exact  # --pairs N: exactly N pairs, not fewer on a verdict
        self.deadline = spec.deadline  # wall clock (time.time()): no new pair after it
        self.distributed = distributed  # then every rank runs the most pairs, so all stop at the same step
        self.current = Block(fix=True, timed=False)
        self.with_data = switch.with_data
        self.baseline_ms: list[float] = []
        self.candidate_ms: list[float] = []
        self.pending: list[Block] = []
        self.started = False

    def at_step_end(self, state: Any, now: float, finish: Callable[[], None]) -> None:
        """A step of this run ended (``state``: the window's ``WindowState``): timed as the window times a step, the
        switch made after its clock stopped and before the next step's starts, so neither arm pays for it; the
        blocks done, the window's ``finish`` ends the run."""
        from advisor.files import intercept

        if state.count >= state.warmup:
            timed = state.count > state.warmup and state.last is not None
            kept = getattr(intercept.LAYER, "spent", 0.0) - state.journal_spent  # the journal's copies
            waited = 0.0 if self.with_data else state.waiting
            if self.step_ended((now - state.last - waited - kept) * 1000 if timed else None):
                state.machine.stop()
                finish()
        state.waiting = 0.0
        state.journal_spent = getattr(intercept.LAYER, "spent", 0.0)
        state.last = time.perf_counter()

    def step_ended(self, step_ms: float | None) -> bool:
        """Called at each step's end from the warm-up's last on; True when the run is done."""
        if not self.started:
            self.started = True
            self.switch.set(True)  # the untimed block with the fix: compilation, the numerics probe
            return False
        block = self.current
        block.seen += 1
        settle = 1 + self.switch.queue_depth  # the step after the switch, and those served by batches made before it
        if block.timed and block.seen > settle and step_ms is not None:
            block.steps_ms.append(step_ms)
        if block.seen < self.steps + settle:
            return False
        if block.timed:
            self.pending.append(block)
        if len(self.pending) == 2:
            self._pair_done()
            if self._enough():
                return True
        self.current = Block(fix=self._next_arm(), timed=True)
        self.switch.set(self.current.fix)
        return False

    def _pair_done(self) -> None:
        # the median step of a block: a step that holds the script's own periodic work (a rollout, an evaluation,
        # a log) falls in one arm or the other by chance, and would otherwise decide the pair
        by_arm = {block.fix: statistics.median(block.steps_ms) for block in self.pending if block.steps_ms}
        if len(by_arm) == 2:
            self.baseline_ms.append(by_arm[False])
            self.candidate_ms.append(by_arm[True])
        self.pending = []

    def _next_arm(self) -> bool:
        """Pairs alternate their order: fix-less first in even pairs, the fix first in odd ones."""
        pair = len(self.baseline_ms)
        first = pair % 2 == 1
        return first if not self.pending else not first

    def _enough(self) -> bool:
        pairs = len(self.baseline_ms)
        if pairs >= self.most_pairs:
            return True
        if self.exact or self.distributed():  # --pairs, or every rank alike: the most pairs, whatever the verdict
            return False
        if self.deadline and time.time() >= self.deadline:
            return True
        if pairs < LEAST_PAIRS:
            return False
        ab = ABResult(self.baseline_ms, self.candidate_ms)
        return verdict(ab.speedup, ab.interval()) != "inconclusive"

    def summary(self) -> dict:
        return {"baseline_ms": self.baseline_ms, "candidate_ms": self.candidate_ms, "steps": self.steps,
                "settle": 1 + self.switch.queue_depth, "with_data": self.with_data}
