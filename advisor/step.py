"""One step of the user's workload, as advisor times and profiles it.

Training: forward, loss, backward, optimizer step, zero_grad. Inference: forward under
``torch.no_grad()`` (the model's train/eval flag is left as the user set it).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from advisor.target import Target, call_model, call_user, default_loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(target: Target, model: torch.nn.Module, inputs: Any, optimizer: Any) -> Callable[[], Any]:
    """A callable running one whole step on the given (copied) model, inputs and optimizer.

    A fix's autocast (and GradScaler), anomaly-mode and step contexts (library flags entered
    and restored around each call) on the target apply here.
    """
    def anomaly():
        if target.detect_anomaly is None:
            return contextlib.nullcontext()
        return torch.autograd.set_detect_anomaly(target.detect_anomaly)

    def precision():
        if target.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=target.device.type, dtype=target.autocast_dtype)

    def flags() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for context in target.step_contexts:
            stack.enter_context(context())
        return stack

    if target.mode == "inference":
        def inference_step() -> Any:
            with flags(), torch.no_grad(), anomaly(), precision():
                return call_model(model, inputs)
        return inference_step

    loss_fn = target.loss_fn
    scaler = torch.amp.GradScaler(target.device.type) if target.grad_scaler else None

    def training_step() -> Any:
        with flags(), anomaly():  # covers the backward too
            with precision():  # forward and loss only, as the AMP recipe says
                output = call_model(model, inputs)
                loss = loss_fn(output, inputs) if loss_fn is not None else default_loss(output)
            if scaler is None:
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
            else:
                scaler.scale(loss).backward()
                if optimizer is not None:
                    scaler.step(optimizer)
                scaler.update()
            if optimizer is not None:
                optimizer.zero_grad()
        return loss
    return training_step


def run_user_step(stage: str, target: Target, step: Callable[[], Any]) -> Any:
    """Run one step, attributing any exception to the user's line."""
    result = call_user(stage, target.path, "the model step", step)
    synchronize(target.device)
    return result
