"""The step window's state, one record: what the spec asked for, what the window has seen of the script so far,
and the parts that record each step (made once torch is imported). The window (``window.py``) and each watcher
(profiled steps, training signs, the window's end, data wait, failures, the marker, a stop request, a measured
run) receive this record and the callbacks they need; none reaches into another's attributes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.files.intercept import suspended

if TYPE_CHECKING:
    from advisor.machine.conditions import Watch
    from advisor.run.window_spec import WindowSpec
    from advisor.script.collector import CollectorWatch
    from advisor.script.ddp import DDPWatcher
    from advisor.script.inference_calls import InferenceCalls
    from advisor.script.logged_steps import StepRecorder
    from advisor.script.recorded_calls import RecordedCall
    from advisor.script.step_contents import StepContents


@dataclass
class ModuleSeen:
    """An outermost module the script called: the model is the one with the most parameters."""

    module: Any
    parameters: int
    site: tuple[str, int] | None  # the user's line that called it (a forward with grad's, once one ran)
    site_with_grad: bool
    calls: int = 0
    inputs: list[str] | None = None  # its first call's inputs, described


@dataclass
class WindowState:
    # what the spec asked for
    out: str
    spec: WindowSpec
    script: str
    warmup: int
    steps: int
    profile_steps: int
    call_steps: int
    full: bool
    measure_only: bool  # verification: time the window, nothing else
    mode: str  # "train" | "inference" as the user said (--mode), else from the signs
    marker: str
    owner: int  # the script's process: a forked child's calls are not the window's
    # the parts that record each step
    machine: Watch
    collector: CollectorWatch  # the garbage collector's passes inside each step
    log: StepRecorder  # every step's time and what happened in it
    contents: StepContents
    inference: InferenceCalls  # the model's calls without grad between updates, from the warm-up's end
    ddp: DDPWatcher  # DistributedDataParallel models, under torchrun
    # the steps
    kind: str | None = None  # what ends a step (run/kinds.py)
    count: int = 0
    last: float | None = None  # when the step running now started
    samples_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    waiting: float = 0.0  # this step's wait for data so far
    journal_spent: float = 0.0  # the file journal's time when the last step ended
    done: bool = False
    depth: int = 0  # modules entered and not yet left
    restarts_after_evaluation: int = 0  # steps whose clock started again when the script left eval mode
    evaluating: bool = False  # the script called model.eval() in this step (training_signs.py)
    evaluations: int = 0  # steps not timed for it
    step_forwards: dict[int, int] = field(default_factory=dict)  # outermost module -> forwards with grad this step
    forwards_per_step: dict[int, int] = field(default_factory=dict)  # ... in the last whole warm-up step
    first_rollout: dict | None = None  # the model's calls without grad before the first step
    # the signs of training
    trains: bool = False  # forwards are not steps: an optimizer was created (or --mode train)
    backward_seen: bool = False
    in_backward: int = 0  # inside torch.autograd.backward: checkpointed layers run their forwards again
    optimizer_created: bool = False
    # what the script made
    lead_module: int | None = None  # the model: the outermost module with the most parameters
    outermost: dict[int, ModuleSeen] = field(default_factory=dict)
    optimizers: dict[int, Any] = field(default_factory=dict)
    optimizer_steps: dict[int, int] = field(default_factory=dict)
    optimizer_sites: dict[int, tuple[str, int] | None] = field(default_factory=dict)  # id -> the line that made it
    lead: int | None = None  # the optimizer whose steps end a step
    loaders: dict[int, Any] = field(default_factory=dict)
    batches: dict[int, list[RecordedCall]] = field(default_factory=dict)  # each outermost module's first calls
    recording: RecordedCall | None = None  # the outermost call running now, when it is recorded
    parametrizations: tuple[type, ...] = ()  # torch's parametrization modules

    @classmethod
    def from_spec(cls, spec: WindowSpec) -> WindowState:
        from advisor.machine.conditions import Watch  # made once torch is imported: the bootstrap imports little
        from advisor.script.collector import CollectorWatch
        from advisor.script.ddp import DDPWatcher
        from advisor.script.inference_calls import InferenceCalls
        from advisor.script.logged_steps import StepRecorder
        from advisor.script.step_contents import StepContents

        return cls(out=spec.out_dir, spec=spec, script=spec.script, warmup=spec.warmup_steps, steps=spec.steps,
                   profile_steps=spec.profile_steps, call_steps=spec.call_steps, full=spec.full,
                   measure_only=spec.measure_only, mode=spec.mode, marker=spec.step_marker, owner=os.getpid(),
                   machine=Watch(), collector=CollectorWatch(), log=StepRecorder(), contents=StepContents(),
                   inference=InferenceCalls(), ddp=DDPWatcher(), trains=spec.mode == "train")

    @property
    def mine(self) -> bool:
        """Whether the calling process is the script's own (not a forked worker)."""
        return os.getpid() == self.owner

    def lead_seen(self) -> ModuleSeen | None:
        return self.outermost.get(self.lead_module) if self.lead_module is not None else None

    def write(self, name: str, payload: dict) -> None:
        """One of the window's files, written whole (advisor's own write: not the script's)."""
        path = os.path.join(self.out, name)
        with suspended():
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            os.replace(path + ".tmp", path)
