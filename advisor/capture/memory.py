"""What the step holds in memory, by kind, whether it grows, and what a larger batch would buy.

A few steps run under torch.profiler with ``profile_memory`` and the Python stack, and torch's memory profiler
(``torch.profiler._memory_profiler``, behind ``export_memory_timeline``) tells each tensor's kind from the
dataflow: parameters, their gradients, the optimizer's state, activations kept for the backward, autograd's own
buffers, inputs and temporaries. Walking its timeline gives the step's peak by kind, each kind's own most, and
the live memory at each step's end: memory still rising from step to step is growth (a tensor history kept
across steps, a cache that fills; what an optimizer's step makes and keeps, L-BFGS's history, is its state and
not counted), and the tensors made in the first step still alive after the last are
counted at the user's line that made them (the innermost frame of the user's above the operator that allocated
them). The capacity is the device's memory on CUDA, the RAM the process has and could get on a CPU.

A larger batch, measured: where the inputs have a batch dimension and the step is short enough, the step is
timed at twice the batch (its inputs repeated along the batch) and at the audited one, and the samples/s
compared. Where torch's memory profiler fails, parameters, gradients and optimizer state are counted from the
live objects and the rest is said to be unmeasured.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

from advisor.evidence.memory_records import HeldMemory, LargerBatch, StepMemory
from advisor.workload.feed import Feed
from advisor.workload.step import make_step, synchronize
from advisor.workload.target import Target, batch_size

MARK = "advisor::memory_step"
STEPS, LONG_STEP_STEPS, LONG_STEP_MS = 3, 2, 100.0
LARGER_BATCH_FACTOR, LARGER_BATCH_STEPS, LARGER_BATCH_WARMUP = 2, 5, 2
LARGER_BATCH_MOST_S = 3.0  # the larger batch is measured only where both batches' steps fit in this
HELD_SITES = 5
KEPT_KINDS = ("PARAMETER", "GRADIENT", "OPTIMIZER_STATE")  # memory a step is meant to keep
OPTIMIZER_FRAMES = "torch/optim/"  # as the profiler names a Python frame of torch's optimizers


def measure_memory(target: Target, step: Callable[[], Any], step_ms: float | None) -> StepMemory:
    device = target.device
    steps = LONG_STEP_STEPS if step_ms and step_ms > LONG_STEP_MS else STEPS
    memory = _by_kind(step, device, steps, target.path)
    memory.capacity_bytes, memory.capacity_kind = _capacity(device)
    parts = getattr(step, "parts", None)
    if parts is not None and step_ms:
        memory.larger_batch = _larger_batch(target, parts, step_ms)
    return memory


def _by_kind(step: Callable[[], Any], device: torch.device, steps: int, model_file: str) -> StepMemory:
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True, with_stack=True) as profiler:
        for _ in range(steps):
            with record_function(MARK):
                step()
                synchronize(device)
    try:
        measured = profiler._memory_profile()
        return _walk(measured, device, steps, model_file)
    except Exception as failure:  # noqa: BLE001 - a private API of torch's: the objects are counted instead
        return _counted(step, device, f"torch's memory profiler failed ({type(failure).__name__}: {failure}); "
                                      "activations and the step's peak were not measured")


def _walk(measured: Any, device: torch.device, steps: int, model_file: str) -> StepMemory:
    from torch.profiler._memory_profiler import Action

    marks = sorted((node.start_time_ns, node.end_time_ns) for node in measured._op_tree.sorted_nodes if node.name == MARK)
    if len(marks) != steps:
        raise RuntimeError(f"{len(marks)} of {steps} measured steps found in the profile")
    categories = measured._categories
    by_optimizer = _made_by_optimizers(measured)
    optimizers_hold = 0  # what the optimizer's step made and keeps (L-BFGS's history): state, bounded by design
    live: dict[str, int] = {}
    made_in_first: dict[Any, int] = {}
    peak, at_peak, most, ends = 0, {}, {}, []
    end_index = 0
    for when, action, (key, version), size in sorted(measured.timeline, key=lambda event: event[0]):
        if key.device.type != device.type:
            continue
        while end_index < len(marks) and when > marks[end_index][1]:
            ends.append(sum(live.values()) - optimizers_hold)
            end_index += 1
        kind = _kind(categories.get(key, version))
        if action in (Action.PREEXISTING, Action.CREATE):
            live[kind] = live.get(kind, 0) + size
            if key in by_optimizer:
                optimizers_hold += size
            elif action == Action.CREATE and marks[0][0] <= when <= marks[0][1]:
                made_in_first[key] = size
        elif action == Action.INCREMENT_VERSION:
            before = _kind(categories.get(key, version - 1))
            live[before] = live.get(before, 0) - size
            live[kind] = live.get(kind, 0) + size
        elif action == Action.DESTROY:
            live[kind] = live.get(kind, 0) - size
            made_in_first.pop(key, None)
            if key in by_optimizer:
                optimizers_hold -= size
        if marks[0][0] <= when <= marks[-1][1]:
            total = sum(live.values())
            for name, held in live.items():
                most[name] = max(most.get(name, 0), held)
            if total > peak:
                peak, at_peak = total, {name: held for name, held in live.items() if held > 0}
    ends += [sum(live.values()) - optimizers_hold] * (len(marks) - end_index)
    surviving = {key: size for key, size in made_in_first.items()
                 if _kind(categories.get(key, 0)) not in (_kind_name(k) for k in KEPT_KINDS)}
    growth = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else 0.0
    return StepMemory(device=str(device), steps=steps, peak_bytes=peak, at_peak=at_peak,
                      most={k: v for k, v in most.items() if v > 0}, step_end_bytes=ends,
                      growth_bytes_per_step=growth, held=_held_at(measured, surviving, model_file))


def _made_by_optimizers(measured: Any) -> set:
    """The tensors an optimizer's own code made: the innermost Python frame above the operator is one of
    ``torch/optim`` (a closure's forward, run inside L-BFGS's step, is the model's code, not the optimizer's)."""
    made = set()
    for node in measured._data_flow_graph.flow_nodes:
        event = node._event
        while event is not None and not str(event.tag).endswith(".PyCall"):
            event = event.parent
        if event is not None and OPTIMIZER_FRAMES in event.name:
            made.update(node.outputs)
    return made


def _kind(category: Any) -> str:
    return _kind_name(category.name) if category is not None else "unattributed"


def _kind_name(name: str) -> str:
    return {"PARAMETER": "parameters", "GRADIENT": "gradients", "OPTIMIZER_STATE": "optimizer state",
            "ACTIVATION": "activations", "AUTOGRAD_DETAIL": "autograd detail", "INPUT": "inputs",
            "TEMPORARY": "temporaries"}.get(name, "unattributed")


def _held_at(measured: Any, surviving: dict[Any, int], model_file: str) -> list[HeldMemory]:
    """The user's lines that made the tensors still alive after the last measured step, most bytes first."""
    from advisor.sources import is_library_path

    if not surviving:
        return []
    sites: dict[tuple[str, int], list[int]] = {}
    for node in measured._data_flow_graph.flow_nodes:
        for key in node.outputs:
            if key in surviving:
                place = _user_line(node._event, is_library_path)
                held = sites.setdefault(place, [0, 0])
                held[0] += surviving.pop(key)
                held[1] += 1
    ranked = sorted(sites.items(), key=lambda item: item[1][0], reverse=True)[:HELD_SITES]
    return [HeldMemory(file=_absolute(file, model_file), line=line, bytes=held[0], tensors=held[1])
            for (file, line), held in ranked]


def _absolute(file: str, model_file: str) -> str:
    """The profiler names a file as Python was given it: a relative one is looked for beside the model file."""
    if not file or os.path.isabs(file):
        return file
    beside = os.path.join(os.path.dirname(os.path.abspath(model_file)), file)
    return beside if os.path.exists(beside) else os.path.abspath(file)


def _user_line(event: Any, is_library_path: Callable[[str], bool]) -> tuple[str, int]:
    while event is not None:
        caller = getattr(event.extra_fields, "caller", None) if str(event.tag).endswith(("PyCall", "PyCCall")) else None
        if caller is not None and not is_library_path(caller.file_name):
            return caller.file_name, caller.line_number
        event = event.parent
    return "", 0


def _counted(step: Callable[[], Any], device: torch.device, note: str) -> StepMemory:
    """Parameters, gradients and optimizer state from the live objects (each storage once)."""
    model, _, optimizer = getattr(step, "parts", (None, None, None))
    seen: set[int] = set()

    def size(tensors: list[torch.Tensor]) -> int:
        total = 0
        for tensor in tensors:
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        return total
    parameters = list(model.parameters()) if model is not None else []
    state = [v for per in (optimizer.state.values() if optimizer is not None else []) for v in per.values()
             if isinstance(v, torch.Tensor)]
    kinds = {"parameters": size(parameters), "gradients": size([p.grad for p in parameters if p.grad is not None]),
             "optimizer state": size(state)}
    return StepMemory(device=str(device), method="tensor accounting", at_peak=kinds, most=kinds, note=note)


def _capacity(device: torch.device) -> tuple[int | None, str]:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1]), "the device's memory"
    from advisor.machine import procfs
    from advisor.machine.conditions import cgroup_memory_room

    available, resident = procfs.available_memory_kb(), (procfs.own_memory_kb("VmRSS") or 0) * 1024
    limited = cgroup_memory_room()
    if available is None and limited is None:
        return None, ""
    rooms = [room for room in (available * 1024 if available is not None else None, limited) if room is not None]
    kind = "under the cgroup's memory limit" if limited is not None and limited == min(rooms) else "of the host's RAM"
    return min(rooms) + resident, f"the memory this process holds and could still get {kind}"


def _larger_batch(target: Target, parts: tuple, step_ms: float) -> LargerBatch | None:
    """The step at LARGER_BATCH_FACTOR x the batch against the audited one, each the median of a few steps on
    the same model and optimizer (the larger one's first steps not timed)."""
    model, feed, optimizer = parts
    size = batch_size(feed.inputs)
    per_batch = (LARGER_BATCH_STEPS + LARGER_BATCH_WARMUP) * step_ms / 1000
    if not size or per_batch * (1 + LARGER_BATCH_FACTOR) > LARGER_BATCH_MOST_S:
        return None
    from torch.utils._pytree import tree_map

    def repeated(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == size:
            return torch.cat([value] * LARGER_BATCH_FACTOR)
        return value
    larger = Feed(items=tuple((tree_map(repeated, inputs), tree_map(repeated, batch)) for inputs, batch in feed.items))
    try:
        audited = _median_ms(make_step(target, model, feed, optimizer), target.device)
        grown = _median_ms(make_step(target, model, larger, optimizer), target.device)
    except Exception:  # noqa: BLE001 - the model or its loss does not take a larger batch as it is fed
        return None
    return LargerBatch(factor=LARGER_BATCH_FACTOR, batch_size=size, step_ms=round(audited, 4),
                       larger_step_ms=round(grown, 4), steps=LARGER_BATCH_STEPS,
                       samples_per_s_ratio=round(LARGER_BATCH_FACTOR * audited / grown, 4) if grown > 0 else 0.0)


def _median_ms(step: Callable[[], Any], device: torch.device) -> float:
    for _ in range(LARGER_BATCH_WARMUP):
        step()
    synchronize(device)
    times = []
    for _ in range(LARGER_BATCH_STEPS):
        began = time.perf_counter()
        step()
        synchronize(device)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)
