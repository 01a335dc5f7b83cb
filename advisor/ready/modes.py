"""eval-mode and inference-mode evidence: modules left training, and how the forward runs without autograd."""

from __future__ import annotations

import inspect
import re
import statistics
from typing import Any

import torch

from advisor.evidence import Location
from advisor.ready.measured import Blocker, ModesEvidence, TrainingModule
from advisor.ready.places import first_line, raised_at
from advisor.workload.target import call_model
from advisor.workload.timing import timer_for

# modules whose output depends on the training flag
TRAINING_DEPENDENT = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm,
                      torch.nn.modules.instancenorm._InstanceNorm)
CALLS = 15


def measure_modes(model: torch.nn.Module, inputs: Any, device: torch.device, model_file: str) -> ModesEvidence:
    evidence = ModesEvidence(training_modules=_left_training(model, model_file))
    with torch.no_grad():
        outputs = call_model(model, inputs)
    evidence.grad_outputs = any(t.requires_grad for t in _tensors(outputs))
    try:
        with torch.inference_mode():
            call_model(model, inputs)
    except Exception as failure:  # noqa: BLE001 - the model's own failure is the evidence
        evidence.inference_mode_error = Blocker(message=f"{type(failure).__name__}: {first_line(failure)}",
                                                location=raised_at(failure, model_file))
        return evidence
    timer = timer_for(device)
    grad, inference = [], []
    for _ in range(CALLS):  # alternating, so drift hits both
        grad.append(timer(lambda: call_model(model, inputs)))
        with torch.inference_mode():
            inference.append(timer(lambda: call_model(model, inputs)))
    evidence.grad_ms, evidence.inference_ms = statistics.median(grad[3:]), statistics.median(inference[3:])
    return evidence


def _left_training(model: torch.nn.Module, model_file: str) -> list[TrainingModule]:
    parents = dict(model.named_modules())
    found = []
    for path, module in model.named_modules():
        if isinstance(module, TRAINING_DEPENDENT) and module.training:
            parent_path, _, attribute = path.rpartition(".")
            found.append(TrainingModule(path=path, kind=type(module).__name__,
                                        location=_assigned_at(parents.get(parent_path, model), attribute)))
    return found


def _assigned_at(parent: torch.nn.Module, attribute: str) -> Location | None:
    """The line of ``__init__`` that assigns ``self.<attribute>``, where the user built the module."""
    try:
        lines, first = inspect.getsourcelines(type(parent).__init__)
        file = inspect.getsourcefile(type(parent).__init__)
    except (OSError, TypeError):
        return None
    assignment = re.compile(rf"self\.{re.escape(attribute)}\s*[:=]")
    for offset, text in enumerate(lines):
        if assignment.search(text):
            return Location.at(file, first + offset)
    return None


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]
