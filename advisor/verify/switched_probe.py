"""The numerics of a fix switched inside one run (``switched.py``): at the first step with the fix on, the model's
forward on the same arguments as the script has it and with the fix (the random state and the buffers put back after
each), and the optimizer's step from the same state with the script's options and with the fix's; the values go to
the parent, which compares them with the rule's tolerance (``switched_arms.probe_numerics``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

FILE = "switched_numerics.pt"
_save = torch.save  # taken before any fix silences the script's saves


@dataclass
class Probe:
    """The values of one forward and one optimizer step, as the script has them and with the fix (``switch``: the
    ``switched.Switch`` whose flags and options it turns off and on around them)."""

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

    def forward(self, model: torch.nn.Module, original: Callable, fixed: Callable, switch: Any,
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

    def optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict, switch: Any) -> None:
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
