"""What the script set up, described once its step window is over (inside its process): the model
(the module whose parameters the optimizer updates), its optimizer, the environment, the loader,
the model's graph on a copy with its first real inputs, and its experts' routing on its batches."""

from __future__ import annotations

import json
import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor.run.window import StepWindow


def the_model(window: StepWindow) -> tuple[Any, list[str]]:
    """The module whose parameters the optimizer updates, else the outermost module with parameters called
    most (a loss function's module is called as often, and has none), the largest of those."""
    if not window.outermost:
        return None, []
    updated = {id(p) for o in window.optimizers.values() for g in o.param_groups for p in g["params"]}

    def rank(entry: list) -> tuple:
        module, calls, _, _, size, _ = entry
        return (sum(1 for p in module.parameters() if id(p) in updated), size > 0, calls, size)
    module, _, inputs, _, _, _ = max(window.outermost.values(), key=rank)
    return module, inputs or []


def model_copy(model: Any) -> Any:
    """A deep copy of the script's model. Tensors the script keeps on its modules outside their parameters and
    buffers (REINFORCE's ``policy.saved_log_probs``, a cached hidden state) may be results of autograd, which
    deepcopy refuses: the copy holds them detached."""
    import copy

    import torch

    memo: dict[int, Any] = {}

    def detach_results(value: Any, depth: int = 0) -> None:
        if isinstance(value, torch.Tensor) and value.grad_fn is not None:
            memo[id(value)] = value.detach()
        elif isinstance(value, (list, tuple, set)) and depth < 3:
            for item in value:
                detach_results(item, depth + 1)
        elif isinstance(value, dict) and depth < 3:
            for item in value.values():
                detach_results(item, depth + 1)

    for module in model.modules():
        for name, value in vars(module).items():
            if name not in ("_parameters", "_buffers", "_modules"):
                detach_results(value)
    return copy.deepcopy(model, memo)


def describe_run(window: StepWindow) -> None:
    """The model, optimizer and environment as the script set them up (target.json, env.json)."""
    import torch

    from advisor.capture.describe_target import describe_model, describe_optimizer
    from advisor.capture.env import capture_environment
    from advisor.evidence import Location, TargetInfo

    model, inputs = the_model(window)
    outer = model
    model = window.ddp.inner(model) if model is not None else None  # DDP's module: DDP itself cannot be copied
    if model is not outer:
        window.batches[id(model)] = window.batches.get(id(outer), [])  # DDP passes its inputs on unchanged
    parameter = next(model.parameters(), None) if model is not None else None
    device = parameter.device if parameter is not None else torch.device("cpu")
    training = window.mode == "train" or (not window.mode and bool(window.optimizers or window.backward_seen))
    info = TargetInfo(model_file=window.script, mode="train" if training else "inference",
                      device=str(device), input_summary=inputs)
    if model is not None:
        site = window.outermost[id(outer)][3]
        if site is not None:
            info.forward_call = Location.at(*site, note="the script's call of the model")
        describe_model(info, model)
        _count_flops(window, outer, model, training=training)
        _capture_graph(window, model)
        _measure_routing(window, model)
    if window.optimizers:
        describe_optimizer(info, next(iter(window.optimizers.values())))
    if (ddp := window.ddp.describe()) is not None:
        window.write("ddp.json", ddp)
    window.write("target.json", json.loads(info.model_dump_json()))
    if window.loaders:
        from advisor.capture.data import describe_loader

        loader = next(iter(window.loaders.values()))
        data = describe_loader(loader, fallback_source=(window.script, 0))
        waits = window.data_wait_ms
        if waits:
            data.batches_measured = len(waits) + 1
            data.batch_ms_samples = waits
            data.batch_ms_median = statistics.median(waits)
            data.measured_in_loop = True
        window.write("data.json", json.loads(data.model_dump_json()))
    window.write("env.json", json.loads(capture_environment(device).model_dump_json()))


def _count_flops(window: StepWindow, outer: Any, model: Any, training: bool) -> None:
    """The model's forward on a copy with its first real inputs, times the forwards of a step (every
    micro-step of gradient accumulation); a training step as 3x that (the script's own step is not
    re-run: its loss and optimizer are the script's business)."""

    import torch

    from advisor.capture.flops import as_training_step, count_flops, repeated

    recorded = window.batches.get(id(model))
    if not recorded:
        return
    twin, inputs = model_copy(model), tuple(recorded[0])
    with torch.no_grad():
        counted = count_flops(lambda: twin(*inputs))
    forwards = window.forwards_per_step.get(id(outer), 1) if window.kind != "forward" else 1
    if forwards > 1 and counted.method != "none":
        counted = repeated(counted, forwards, f"{forwards} forwards of the model per step (gradient accumulation)")
    if training and counted.method != "none":
        counted = as_training_step(counted, "advisor run counts the model's forward on a copy; the training step is "
                                            "estimated as 3x its forward")
    window.write("flops.json", json.loads(counted.model_dump_json()))


def _capture_graph(window: StepWindow, model: Any) -> None:
    """Dynamo's view of the model, on a deep copy, with the inputs of its first real call."""

    from advisor.capture.graph import capture_call

    recorded = window.batches.get(id(model))
    if not recorded:
        return
    inputs = recorded[0]  # its first real call
    try:
        capture = capture_call(model_copy(model), tuple(inputs), {})
    except Exception as failure:  # noqa: BLE001 - graph rules are then blind, and the report says why
        window.write("graph_error.json", {"message": f"{type(failure).__name__}: {str(failure).splitlines()[0][:300]}"})
        return
    window.write("graph.json", json.loads(capture.model_dump_json()))


def _measure_routing(window: StepWindow, model: Any) -> None:
    """Tokens per expert on the script's own batches (those of its first steps), on a copy."""

    from advisor.capture.routing import route

    batches = window.batches.get(id(model)) or []
    if not batches:
        return
    twin = model_copy(model)
    try:
        groups = route(twin, batches, "dataloader" if window.loaders else "script", lambda args: twin(*args))
    except Exception as failure:  # noqa: BLE001 - routing is evidence for one rule, never the run's end
        window.write("routing_error.json", {"message": f"{type(failure).__name__}: {failure}"})
        return
    window.write("routing.json", {"groups": [json.loads(g.model_dump_json()) for g in groups]})

