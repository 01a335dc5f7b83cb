"""One step of the user's workload, as advisor times and profiles it.

Training: forward, loss, backward, optimizer step, zero_grad. Inference: forward under
``torch.no_grad()`` (the model's train/eval flag is left as the user set it).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from advisor.target import Target, call_model, call_user, default_loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(target: Target, model: torch.nn.Module, inputs: Any, optimizer: Any) -> Callable[[], Any]:
    """A callable running one whole step on the given (copied) model, inputs and optimizer."""
    if target.mode == "inference":
        def inference_step() -> Any:
            with torch.no_grad():
                return call_model(model, inputs)
        return inference_step

    loss_fn = target.loss_fn

    def training_step() -> Any:
        output = call_model(model, inputs)
        loss = loss_fn(output, inputs) if loss_fn is not None else default_loss(output)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        return loss
    return training_step


def run_user_step(stage: str, target: Target, step: Callable[[], Any]) -> Any:
    """Run one step, attributing any exception to the user's line."""
    result = call_user(stage, target.path, "the model step", step)
    synchronize(target.device)
    return result
