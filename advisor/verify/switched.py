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

Numerics, at the first step with the fix on: the model's forward and the optimizer's step without and with the
fix, from the same state (``switched_probe.py``).

In a training callback's window (``WindowSpec.in_training``, ``integrations/in_run_verification.py``) a forward the
fix breaks runs without it and ends the window (``Switch.failed``), and ``withdraw`` takes every change back.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from advisor.run.window_spec import BlocksSpec
from advisor.verify.inject import Injection
from advisor.verify.measure import ABResult, verdict
from advisor.verify.switched_probe import Probe

LEAST_PAIRS = 6  # before a run may end itself on a verdict


class Switch:
    """The fix's switchable parts, on or off between steps: the model's forward, the optimizers' options,
    the fix's flags."""

    def __init__(self, injection: Injection, forgiving: bool = False):
        self.injection = injection
        self.on = False
        self.own_options: dict[int, tuple[Any, list[dict]]] = {}  # optimizer id -> (it, each group's own options)
        self.probe = Probe()
        self.twins: dict[int, Any] = {}  # a loader's id -> its twin with the fix's settings
        self.queue_depth = 0  # the most batches any loader's workers hold ready (prefetched while its arm is off)
        self.taken_back: list[Callable[[], None]] = []  # what withdraw() undoes, last change first
        self.forgiving = forgiving  # a user's own training: a forward the fix breaks runs without it (``failed``)
        self.failed = ""
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
        self.taken_back.append(lambda: setattr(DataLoader, "__iter__", own_iter))

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
        if self.forgiving:  # in a user's own training, a fix that fails is switched off, never the training's end
            switched = self._forgiving(switched, original)
        own = model.__dict__.get("forward")  # an instance's own forward (a wrapper some library set), else the class's
        model.forward = switched
        self.injection.model_fixed = True
        self.taken_back.append(lambda: setattr(model, "forward", own) if own is not None else
                               model.__dict__.pop("forward", None))

    def _forgiving(self, switched: Callable, original: Callable) -> Callable:
        switch = self

        def forgiving(*args, **kwargs):
            if not switch.on:
                return original(*args, **kwargs)
            try:
                return switched(*args, **kwargs)
            except Exception as broken:  # noqa: BLE001 - the fix's failure, said; the step runs as the script has it
                switch.failed = f"the forward with the fix raised {type(broken).__name__}: {broken}"[:400]
                switch.set(False)
                return original(*args, **kwargs)
        return forgiving

    def withdraw(self) -> None:
        """The fix off and every change made for switching it taken back: the run goes on as the script has it
        (a training callback's verification, in the user's own training)."""
        self.set(False)
        self.injection.lasting.close()
        while self.taken_back:
            self.taken_back.pop()()

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

        if self.switch.failed:  # the fix broke a forward (in a user's training): it stays off, the run is over
            state.machine.stop()
            finish()
        elif state.count >= state.warmup:
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
