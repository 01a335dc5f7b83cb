"""One step of the user's workload, as advisor times and profiles it.

Training: forward, loss, backward, optimizer step, zero_grad (an optimizer whose step needs a closure, LBFGS,
is given one holding the zero_grad, forward, loss and backward, and runs it as often as it needs). Inference: forward under
``torch.no_grad()`` (the model's train/eval flag is left as the user set it). Each call takes
the next (inputs, batch) pair of the feed: the loader's real batches, or ``get_inputs()``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from advisor.errors import AuditError
from advisor.workload.feed import Feed, describe
from advisor.workload.target import Target, call_model, call_user, default_loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(target: Target, model: torch.nn.Module, feed: Feed, optimizer: Any) -> Callable[[], Any]:
    """A callable running one whole step on the given (copied) model, inputs and optimizer, which it holds as
    ``step.parts`` (``copy_of_step``).

    A fix's autocast (and GradScaler), anomaly-mode and step contexts (library flags entered
    and restored around each call) on the target apply here.
    """
    step = _step(target, model, feed, optimizer)
    step.parts = (model, feed, optimizer)  # type: ignore[attr-defined]
    return step


def copy_of_step(target: Target, step: Callable[[], Any]) -> Callable[[], Any] | None:
    """A step on a deep copy of ``step``'s model, data and optimizer as they are now: its state after the steps it
    ran, in memory of its own (workload/settling.py). None where they cannot be copied."""
    from advisor.workload.model_copy import model_copy

    parts = getattr(step, "parts", None)
    if parts is None:
        return None
    memo: dict = {}
    try:
        model, feed, optimizer = model_copy(parts, memo)  # one call: the optimizer's parameters are the copy's
        if optimizer is not None:
            # an optimizer deep-copies only what Optimizer.__getstate__ names (defaults, state, param_groups): L-BFGS
            # keeps its parameters in _params too, and a copy without them fails at its first step
            for name, value in vars(parts[2]).items():
                if name not in vars(optimizer):
                    setattr(optimizer, name, model_copy(value, memo))
    except Exception:  # noqa: BLE001 - an object of the user's that does not copy (a compiled model, a lock)
        return None
    return make_step(target, model, feed, optimizer)


def _step(target: Target, model: torch.nn.Module, feed: Feed, optimizer: Any) -> Callable[[], Any]:
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

    data = feed.cycle()
    if target.mode == "inference":
        def inference_step() -> Any:
            inputs, _ = next(data)
            with flags(), torch.no_grad(), anomaly(), precision():
                return call_model(model, inputs)
        return inference_step

    loss_fn = target.loss_fn
    scaler = torch.amp.GradScaler(target.device.type) if target.grad_scaler else None

    if optimizer is not None and needs_closure(optimizer):
        def closure_step() -> Any:  # LBFGS: the optimizer runs the forward and backward as often as it needs
            inputs, batch = next(data)

            def closure() -> Any:
                optimizer.zero_grad()
                with precision():
                    output = call_model(model, inputs)
                    loss = loss_fn(output, batch) if loss_fn is not None else default_loss(output)
                loss.backward()
                return loss
            with flags(), anomaly():
                return optimizer.step(closure)
        return closure_step

    def training_step() -> Any:
        inputs, batch = next(data)
        with flags(), anomaly():  # covers the backward too
            with precision():  # forward and loss only, as the AMP recipe says
                output = call_model(model, inputs)
                loss = loss_fn(output, batch) if loss_fn is not None else default_loss(output)
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


def needs_closure(optimizer: Any) -> bool:
    """An optimizer whose step must be given a closure (LBFGS): its ``closure`` parameter has no default."""
    import inspect

    try:
        parameter = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def run_user_step(stage: str, target: Target, step: Callable[[], Any]) -> Any:
    """Run one step, attributing any exception to the user's line and saying what it was given."""
    try:
        result = call_user(stage, target.path, "the model step", step)
    except AuditError as failure:
        failure.error.message += f" ({given(target)})"
        raise
    synchronize(target.device)
    return result


def given(target: Target) -> str:
    """What the step was given, in words, for errors: the batch and the model's inputs."""
    source = target.prepare_feed()
    inputs, batch = source.pairs[0]
    if source.source == "loader":
        if target.inputs_from_batch is not None:
            how = "picked by inputs_from_batch(batch)"
        elif isinstance(batch, (tuple, list)):
            how = "batch[0], the default"
        else:
            how = "the batch itself, the default"
        return (f"the step was given the loader's first batch, {describe(batch)}; the model's inputs were "
                f"{describe(inputs)} ({how}); loss_fn(output, batch) received the whole batch")
    return f"the step was given get_inputs(), {describe(inputs)}, as the model's inputs and as loss_fn's batch"
