"""What the script set up, described once its step window is over (inside its process): the model
(the module whose parameters the optimizer updates), its optimizer, the environment, the loader,
the model's graph on a copy with its first real call's arguments, and its experts' routing on its batches. The
step's FLOPs are read from its trace (``FlopCount.of_trace``), not counted on a copy."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

from advisor.script.window_state import ModuleSeen, WindowState
from advisor.sources import is_library_path
from advisor.workload.model_copy import model_copy


def the_model(state: WindowState) -> tuple[Any, list[str]]:
    """The module whose parameters the optimizer updates, else the outermost module with parameters called
    most (a loss function's module is called as often, and has none), the largest of those."""
    if not state.outermost:
        return None, []
    updated = {id(p) for o in state.optimizers.values() for g in o.param_groups for p in g["params"]}

    def rank(seen: ModuleSeen) -> tuple:
        return (sum(1 for p in seen.module.parameters() if id(p) in updated), seen.parameters > 0, seen.calls,
                seen.parameters)
    chosen = max(state.outermost.values(), key=rank)
    module, inputs = chosen.module, chosen.inputs
    return module, inputs or []


def owner_of(parameters: list) -> Any:
    """The smallest module that holds every one of ``parameters`` (an optimizer's): the model a LightningModule, a
    GP or a policy is, where the script's step calls only its parts (``self.encoder(x)`` in a training_step) or
    calls it outside nn.Module's hooks (gpytorch's own ``__call__``). Climbed from the modules holding the first
    parameter through every parent, found by what refers to them (a module may have several: a GP's likelihood is
    its model's and the marginal likelihood's). Among the smallest that hold them all, the user's own class names
    the model (ODEFunc, not the nn.Sequential inside it nor the solver's wrapper around it; ExactGPModel, not the
    marginal likelihood holding it and its likelihood), else the outermost; None where no such module is found."""
    if not parameters:
        return None
    wanted = {id(p) for p in parameters}
    frontier = _owners(parameters[0], "_parameters")
    seen: dict[int, tuple[Any, int, int]] = {}  # id -> (module, its parameters, the level it was reached at)
    for level in range(MAX_CLIMB):
        upward = []
        for module in frontier:
            if id(module) in seen:
                continue
            held = {id(p) for p in module.parameters()}
            seen[id(module)] = (module, len(held), level)
            parents = _owners(module, "_modules")
            # not all of them yet: every parent; all: the parents that hold the same and no more (alike)
            upward += parents if not wanted <= held else [
                parent for parent in parents if {id(p) for p in parent.parameters()} == held]
        if not upward:
            break
        frontier = upward
    holders = [(module, size, level) for module, size, level in seen.values()
               if wanted <= {id(p) for p in module.parameters()}]
    if not holders:
        return None
    smallest = min(size for _, size, _ in holders)
    alike = [(module, level) for module, size, level in holders if size == smallest]
    users = [(module, level) for module, level in alike
             if not is_library_path(getattr(sys.modules.get(type(module).__module__), "__file__", "") or "")]
    return max(users or alike, key=lambda entry: entry[1])[0]


MAX_CLIMB = 16  # levels of modules between a parameter and the model that holds them all


def _owners(value: Any, table: str) -> list:
    """The modules whose ``table`` (their ``_parameters`` or ``_modules`` dict) holds ``value``."""
    import gc

    import torch

    found: list = []
    for holder in gc.get_referrers(value):
        if not isinstance(holder, dict):
            continue
        for referrer in gc.get_referrers(holder):
            # the module itself (an instance dict Python manages inline), or its __dict__ that refers to the table
            owners = [referrer] if isinstance(referrer, torch.nn.Module) else \
                gc.get_referrers(referrer) if isinstance(referrer, dict) and referrer.get(table) is holder else []
            found += [owner for owner in owners if isinstance(owner, torch.nn.Module)
                      and owner.__dict__.get(table) is holder and all(owner is not other for other in found)]
    return found


class Missing:
    """The facts one part of describing the run could not gather (a copy the model refuses, a capture that fails):
    the rest goes on, and the report names what is missing and why (missing.json)."""

    def __init__(self, state: WindowState):
        self.state = state
        self.parts: list[dict] = []

    def attempt(self, part: str, facts: str, work: Any) -> None:
        try:
            work()
        except Exception as failure:  # noqa: BLE001 - advisor's own failure on this model: said, never the run's end
            text = str(failure).strip().splitlines()
            said = f"{type(failure).__name__}: {text[0][:300]}" if text else type(failure).__name__
            self.parts.append({"part": part, "facts": facts, "message": said})

    def write(self) -> None:
        if self.parts:
            self.state.write("missing.json", {"parts": self.parts})


def describe_run(state: WindowState) -> None:
    """The model, optimizer and environment as the script set them up (target.json, env.json), each part on its
    own: a part that fails leaves its facts missing, named in missing.json, and the others are still written. The
    model is read where it lives (nothing of it copied); only the stages that must run it again work on a copy,
    with the arguments of its first real call."""
    import torch

    from advisor.capture.describe_target import describe_model, describe_optimizer
    from advisor.capture.env import capture_environment
    from advisor.evidence import Location, TargetInfo

    missing = Missing(state)
    model, inputs = the_model(state)
    outer = model
    model = state.ddp.inner(model) if model is not None else None  # DDP's module: DDP itself cannot be copied
    if model is not outer:
        state.batches[id(model)] = state.batches.get(id(outer), [])  # DDP passes its inputs on unchanged
    # what the report names: the smallest module holding all the optimizer updates (a LightningModule whose step
    # calls its parts, the ODE function inside its solver's wrapper), else the module the step called
    lead = state.optimizers.get(state.lead)
    updated = [p for group in lead.param_groups for p in group["params"]] if lead is not None else []
    described = (owner_of(updated) if updated else None) or model
    parameter = next(described.parameters(), None) if described is not None else None
    device = parameter.device if parameter is not None else torch.device("cpu")
    training = state.mode == "train" or (not state.mode and bool(state.optimizers or state.backward_seen))
    info = TargetInfo(model_file=state.script, mode="train" if training else "inference",
                      device=str(device), input_summary=inputs)
    if described is not None:
        missing.attempt("model", "the model's class, parameters and modules", lambda: describe_model(info, described))
    if model is not None and described is not None and described is not model:
        # a verification run finds the module the step calls, whose forward its fixes change
        info.called_module = type(model).__qualname__
        info.called_params = sum(p.numel() for p in model.parameters())
    if model is not None:
        site = state.outermost[id(outer)].site
        if site is not None:
            info.forward_call = Location.at(*site, note="the script's call of the model")
        if next(model.parameters(), None) is None and described is not model:
            state.write("graph_error.json", {"message": f"the script's steps called none of {type(described).__name__}'s "
                                                         "modules through nn.Module's call (its library runs forward "
                                                         "itself): no call of the model to capture a graph with"})
        else:
            missing.attempt("graph", "the model's graph (the graph rules)", lambda: _capture_graph(state, model))
            missing.attempt("routing", "its experts' routing", lambda: _measure_routing(state, model))
    if state.optimizers:
        missing.attempt("optimizer", "the optimizer's settings",
                        lambda: describe_optimizer(info, next(iter(state.optimizers.values()))))
        if (made := state.optimizer_sites.get(state.lead)) is not None:
            info.optimizer_call = Location.at(*made, note="where the optimizer is created")
    if (ddp := state.ddp.describe()) is not None:
        state.write("ddp.json", ddp)
    state.write("target.json", json.loads(info.model_dump_json()))
    if state.loaders:
        missing.attempt("loader", "the data loader's settings", lambda: _describe_loader(state))
    missing.attempt("environment", "the environment (versions, threads, the device's flags)",
                    lambda: state.write("env.json", json.loads(capture_environment(device).model_dump_json())))
    missing.attempt("roofs", "the machine's roofs (the roofline, below-roof, slow-precision)",
                    lambda: _machine_roofs(state, device))
    missing.write()


def _machine_roofs(state: WindowState, device: Any) -> None:
    """The roofs of the device the model ran on, as an audit has them: from the cache, or measured here once the
    steps are timed (about a second, the first time on a machine), quiet or said to be contended."""
    from advisor.capture.calibrate import machine_peaks
    from advisor.capture.env import device_name
    from advisor.files.intercept import suspended

    with suspended():  # advisor's own cache, not the script's writes
        state.write("peaks.json", json.loads(machine_peaks(device, device_name(device)).model_dump_json()))


def _describe_loader(state: WindowState) -> None:
    from advisor.capture.data import describe_loader

    loader = next(iter(state.loaders.values()))
    data = describe_loader(loader, fallback_source=(state.script, 0))
    waits = state.data_wait_ms
    if waits:
        data.batches_measured = len(waits) + 1
        data.batch_ms_samples = waits
        data.batch_ms_median = statistics.median(waits)
        data.measured_in_loop = True
    state.write("data.json", json.loads(data.model_dump_json()))


def _capture_graph(state: WindowState, model: Any) -> None:
    """Dynamo's view of the model, on a deep copy, with the arguments and keyword arguments of its first real call."""

    from advisor.capture.graph import capture_call

    recorded = state.batches.get(id(model))
    if not recorded:
        return
    first = recorded[0]  # its first real call, as the script made it
    twin = model_copy(model)  # a copy the model refuses: the graph's facts are missing (Missing says why)
    try:
        capture = capture_call(twin, tuple(first.args), dict(first.kwargs))
    except Exception as failure:  # noqa: BLE001 - graph rules are then blind, and the report says why
        state.write("graph_error.json", {"message": f"{type(failure).__name__}: {str(failure).splitlines()[0][:300]}"})
        return
    state.write("graph.json", json.loads(capture.model_dump_json()))


def _measure_routing(state: WindowState, model: Any) -> None:
    """Tokens per expert on the script's own batches (those of its first steps), on a copy."""

    from advisor.capture.routing import route, sibling_groups

    batches = state.batches.get(id(model)) or []
    if not batches or not sibling_groups(model):  # no experts to route to: nothing to copy the model for
        return
    twin = model_copy(model)
    try:
        groups = route(twin, batches, "dataloader" if state.loaders else "script",
                       lambda call: twin(*call.args, **call.kwargs))
    except Exception as failure:  # noqa: BLE001 - routing is evidence for one rule, never the run's end
        state.write("routing_error.json", {"message": f"{type(failure).__name__}: {failure}"})
        return
    state.write("routing.json", {"groups": [json.loads(g.model_dump_json()) for g in groups]})

