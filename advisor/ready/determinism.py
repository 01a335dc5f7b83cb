"""determinism evidence: two calls on the same inputs, compared bit for bit; when they differ, the
random ops (seeded draws) and the bitwise-nondeterministic kernels the forward ran, at the user's lines."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from advisor.ready.measured import Blocker, DeterminismEvidence
from advisor.rulekit.rule import Location
from advisor.sources import user_frame
from advisor.verify.numerics import compare, tensors_of
from advisor.workload.target import call_model


def measure_determinism(model: torch.nn.Module, inputs: Any) -> DeterminismEvidence:
    with torch.no_grad():
        first, second = _outputs(model, inputs), _outputs(model, inputs)
    difference = compare(first, second)
    evidence = DeterminismEvidence(equal=difference.max_abs_error == 0, max_abs_diff=difference.max_abs_error,
                                   max_rel_diff=difference.max_rel_error)
    if evidence.equal:
        return evidence
    seeded = []
    for _ in range(2):
        torch.manual_seed(0)
        with torch.no_grad():
            seeded.append(_outputs(model, inputs))
    evidence.equal_when_seeded = compare(*seeded).max_abs_error == 0
    watcher = _KernelWatcher()
    with torch.no_grad(), watcher:
        call_model(model, inputs)
    evidence.random_ops, evidence.nondeterministic_ops = watcher.random, watcher.nondeterministic
    return evidence


def _outputs(model: torch.nn.Module, inputs: Any) -> list[torch.Tensor]:
    return [t.clone() for t in tensors_of(call_model(model, inputs))]


class _KernelWatcher(TorchDispatchMode):
    """ATen ops tagged as seeded-random or bitwise-nondeterministic, with the user's line that ran them."""

    def __init__(self) -> None:
        super().__init__()
        self.random: list[Blocker] = []
        self.nondeterministic: list[Blocker] = []
        self._seen: set[tuple[str, str, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tags = getattr(func, "tags", ())
        for tag, found in ((torch.Tag.nondeterministic_seeded, self.random),
                           (torch.Tag.nondeterministic_bitwise, self.nondeterministic)):
            if tag in tags:
                place = user_frame(depth=2)
                key = (func.name(), *(place or ("", 0)))
                if key not in self._seen:
                    self._seen.add(key)
                    found.append(Blocker(message=func.name(), location=Location.at(*place) if place else None))
        return func(*args, **(kwargs or {}))
