"""The first steps' results of one run of the script, to check a fix's numerics across runs.

Inside the script (verification runs only): the losses of the first backward calls, every
gradient at each optimizer's first step (before it updates anything), and the model's first
outputs. Runs are seeded alike, so without a fix two runs give the same values; with one, the
difference is the fix's. Compared in the parent with the same measure as ``audit``'s.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from advisor.verify.numerics import Comparison, compare, tensors_of

LOSSES_KEPT = 3  # backward calls recorded: a few steps, or the micro-steps of one accumulated step
ELEMENTS_KEPT = 16_000_000  # beyond this many gradient values, each tensor is kept as its norm
FILE = "first_results.pt"
_save = torch.save  # taken before any fix silences the script's saves (checkpoint-in-step)


class FirstResults:
    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.gradients: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.stepped: set[int] = set()
        self.first_forward_s: float | None = None
        self.precision: str | None = None  # the reduced precision the model's first call computed in
        self._backward = None

    def watch_backward(self) -> None:
        """Record the value each of the first backward calls starts from (the loss)."""
        original = torch.autograd.backward
        self._backward = original
        results = self

        def backward(tensors, *args, **kwargs):
            root = tensors if isinstance(tensors, torch.Tensor) else next(iter(tensors), None)
            if isinstance(root, torch.Tensor):
                results.losses.append(root.detach().double().sum().cpu())
            if len(results.losses) >= LOSSES_KEPT:
                torch.autograd.backward = original
            return original(tensors, *args, **kwargs)
        torch.autograd.backward = backward

    def before_optimizer_step(self, optimizer: Any) -> None:
        if id(optimizer) in self.stepped:
            return
        self.stepped.add(id(optimizer))
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        whole = sum(g.numel() for g in grads) + sum(g.numel() for g in self.gradients) <= ELEMENTS_KEPT
        self.gradients += [g.detach().clone().cpu() if whole else g.detach().double().norm().reshape(1).cpu()
                           for g in grads]

    def record_output(self, output: Any) -> None:
        if not self.outputs:
            self.outputs = [t.clone().cpu() for t in tensors_of(output)]

    def save(self, folder: str) -> None:
        _save({"losses": self.losses, "gradients": self.gradients, "outputs": self.outputs,
               "precision": self.precision}, os.path.join(folder, FILE))


def load(folder: str) -> dict | None:
    path = os.path.join(folder, FILE)
    return torch.load(path, weights_only=True) if os.path.exists(path) else None


def compared(baseline: dict, candidate: dict) -> tuple[Comparison, str]:
    """(the comparison, what was compared in words): losses and gradients where the script trains,
    else the model's first outputs."""
    if baseline["losses"] or baseline["gradients"]:
        what = "losses of the first backward calls and the gradients at the first optimizer step"
        return compare(_stacked(baseline["losses"]) + baseline["gradients"],
                       _stacked(candidate["losses"]) + candidate["gradients"]), what
    return compare(baseline["outputs"], candidate["outputs"]), "the model's first outputs"


def _stacked(losses: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.stack(losses)] if losses else []
