"""What one step of the script contained, observed in its own process: the calls of its outermost modules (with
and without grad), backwards, optimizer steps (and the closures they were given), ``GradScaler`` steps,
``zero_grad`` calls, and parameters updated by hand (through ``.data``, or in place under ``no_grad``) in a
script with no optimizer. Counted between two step boundaries during the warm-up (the last whole warm-up step
is kept), so the timed steps run without the counting; reported with how the step was recognised.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass
class Counts:
    forwards: dict[str, int] = field(default_factory=dict)  # the model's class -> calls with grad
    forwards_without_grad: dict[str, int] = field(default_factory=dict)
    backwards: int = 0
    optimizer_steps: dict[str, int] = field(default_factory=dict)  # optimizer class -> steps
    closures: int = 0  # optimizer steps given a closure (LBFGS: each runs it many times)
    scaler_steps: int = 0
    zero_grads: int = 0
    updated_by_hand: int = 0  # parameters changed outside any optimizer

    def as_dict(self) -> dict:
        return asdict(self)


def _plural(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def summary(counts: dict) -> str:
    """One step's contents in words: '1 forward of RNNModel, 1 backward, 1 zero_grad, 4 parameters updated by
    hand (no optimizer)'."""
    parts = [f"{_plural(n, 'forward')} of {name}" for name, n in counts.get("forwards", {}).items()]
    parts += [f"{_plural(n, 'forward')} of {name} without grad" for name, n in
              counts.get("forwards_without_grad", {}).items()]
    if counts.get("backwards"):
        parts.append(_plural(counts["backwards"], "backward"))
    for name, n in counts.get("optimizer_steps", {}).items():
        parts.append(f"{_plural(n, 'step')} of {name}")
    if counts.get("closures"):
        parts.append(f"{_plural(counts['closures'], 'closure')} given to the optimizer's step (the forwards and "
                     "backwards run inside it)")
    if counts.get("scaler_steps"):
        parts.append(f"{_plural(counts['scaler_steps'], 'GradScaler step')}")
    if counts.get("zero_grads"):
        parts.append(_plural(counts["zero_grads"], "zero_grad"))
    if counts.get("updated_by_hand"):
        parts.append(f"{_plural(counts['updated_by_hand'], 'parameter')} updated by hand (no optimizer)")
    return ", ".join(parts) or "no call of a module with parameters"


class StepContents:
    """Counts of the current step; ``close_step`` keeps them as the last whole step's while ``counting``."""

    def __init__(self) -> None:
        self.current = Counts()
        self.whole: Counts | None = None
        self.counting = True  # until the warm-up ends: the timed steps run without the watches
        self.owner = os.getpid()
        self._data_watch: Any = None
        self._versions: dict[int, int] = {}
        self._parameters: Callable[[], list] = lambda: []
        self._by_hand: set[int] = set()
        self._discarding = False
        self._restore: list[tuple[type, str, Any]] = []  # the methods wrapped while the step is read

    def install(self, parameters: Callable[[], list]) -> None:
        """Watch zero_grad and the scaler's steps; watch ``.data`` on parameters until an optimizer is created
        or the warm-up ends. ``parameters`` gives the model's parameters (versions compared at boundaries)."""
        import torch

        self._parameters = parameters
        contents = self

        def counted(owner: type, name: str, attribute: str) -> None:
            original = getattr(owner, name)
            contents._restore.append((owner, name, original))

            @functools.wraps(original)
            def watched(*args, **kwargs):
                if contents.counting and os.getpid() == contents.owner:
                    setattr(contents.current, attribute, getattr(contents.current, attribute) + 1)
                return original(*args, **kwargs)
            setattr(owner, name, watched)

        counted(torch.optim.Optimizer, "zero_grad", "zero_grads")
        counted(torch.nn.Module, "zero_grad", "zero_grads")
        scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler is not None:
            counted(scaler, "step", "scaler_steps")
        self._watch_data()

    def _watch_data(self) -> None:
        """``param.data.add_(...)``: a parameter's ``.data`` taken in a step, the usual update by hand (it
        bumps no version counter). A Python property over the C one, only while the step is being read."""
        import torch

        original = torch._C.TensorBase.data
        by_hand = self._by_hand

        def get(tensor):
            if type(tensor) is torch.nn.Parameter:
                by_hand.add(id(tensor))
            return original.__get__(tensor)

        def put(tensor, value):
            original.__set__(tensor, value)
        torch.Tensor.data = property(get, put, doc=original.__doc__)
        self._data_watch = original

    def stop_watching_data(self) -> None:
        import torch

        if self._data_watch is not None and "data" in torch.Tensor.__dict__:
            del torch.Tensor.data
        self._data_watch = None
        self._by_hand.clear()

    def forward(self, name: str, with_grad: bool) -> None:
        if self.counting:
            table = self.current.forwards if with_grad else self.current.forwards_without_grad
            table[name] = table.get(name, 0) + 1

    def backward(self) -> None:
        if self.counting:
            self.current.backwards += 1

    def optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if not self.counting:
            return
        name = type(optimizer).__name__
        self.current.optimizer_steps[name] = self.current.optimizer_steps.get(name, 0) + 1
        closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0] is the optimizer itself
        if callable(closure):
            self.current.closures += 1

    def close_step(self, optimizers: int) -> None:
        """A step boundary: the step that ended is kept as the last whole one."""
        if not self.counting:
            return
        if self._discarding:
            self._discarding = False
            self.restart()
            return
        if not optimizers:
            changed = self._changed_versions()
            self.current.updated_by_hand = len(self._by_hand | changed)
        self._by_hand.clear()
        self.whole, self.current = self.current, Counts()

    def discard_next(self) -> None:
        """The step that ends at the next boundary is not a whole one: the last whole step stays the reading."""
        self._discarding = True

    def restart(self) -> None:
        """The step's clock starts again (after an evaluation pass): what came before it is not the step's."""
        self.current = Counts()
        self._by_hand.clear()

    def _changed_versions(self) -> set[int]:
        """Parameters changed in place since the last boundary (``with torch.no_grad(): p -= lr * p.grad``)."""
        changed = set()
        for parameter in self._parameters():
            key, version = id(parameter), parameter._version
            if key in self._versions and self._versions[key] != version:
                changed.add(key)
            self._versions[key] = version
        return changed

    def end_counting(self) -> None:
        """The warm-up is over: the timed steps run without the watches' bookkeeping."""
        self.counting = False
        self.stop_watching_data()
        for owner, name, original in reversed(self._restore):  # the watched steps after see torch's own methods
            setattr(owner, name, original)
        self._restore.clear()
        self._versions.clear()

    def reading(self) -> dict | None:
        whole = self.whole if self.whole is not None else (self.current if self.counting else None)
        if whole is None:
            return None
        counts = whole.as_dict()
        return {"counts": counts, "summary": summary(counts)}
