"""The most memory one step holds: what it starts with (parameters, gradients, the optimizer's state, the inputs:
each storage once) plus the most its allocations rise above that while it runs.

The rise is the allocator's own count. On CUDA, the caching allocator's peak over the step less what was allocated
when it began (other copies on the device, a baseline beside a candidate, do not count). On a CPU, which keeps no
such count, the profiler's memory events (``profile_memory=True``: every allocation and free of the CPU allocator,
from the step's start) summed in order; a warm profiler adds next to nothing to a step. Both the memory stage
(``capture/memory.py``) and a memory fix's verification (``verify/memory_ab.py``) measure a peak this way, so the
peak an audit reports and the baseline a fix is measured against are the same quantity.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from advisor.workload.step import synchronize

PEAK_METHOD = {True: "what the step holds at its start plus the CUDA caching allocator's rise over it",
               False: "what the step holds at its start plus the CPU allocator's rise over it (the profiler's memory "
                      "events)"}


def kept_kinds(model: Any, optimizer: Any) -> list[tuple[str, list[torch.Tensor]]]:
    """The tensors a step keeps by design: parameters, gradients, the optimizer's state (L-BFGS keeps lists)."""
    parameters = list(model.parameters()) if model is not None else []
    state: list[torch.Tensor] = []
    for per_parameter in (optimizer.state.values() if optimizer is not None and hasattr(optimizer, "state") else []):
        for value in per_parameter.values():
            values = value if isinstance(value, (list, tuple)) else [value]
            state += [v for v in values if isinstance(v, torch.Tensor)]
    return [("parameters", parameters), ("gradients", [p.grad for p in parameters if p.grad is not None]),
            ("optimizer state", state)]


def input_tensors(feed: Any) -> list[torch.Tensor]:
    return [leaf for pair in (feed.items if feed is not None else ()) for leaf in tree_flatten(pair)[0]
            if isinstance(leaf, torch.Tensor)]


def held_bytes(parts: tuple, device: torch.device) -> int:
    """What a step of ``parts`` (model, feed, optimizer) holds between steps, each storage once."""
    model, feed, optimizer = parts
    tensors = [t for _, group in kept_kinds(model, optimizer) for t in group] + input_tensors(feed)
    seen: dict[int, int] = {}
    for tensor in tensors:
        if tensor.device.type == device.type:
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class PeakUnmeasurable(RuntimeError):
    """The rise could not be counted (another profiler is recording)."""


def rise_of(step: Callable[[], Any], device: torch.device) -> int:
    """The most bytes the step's allocations stood above what was allocated when it began."""
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return max(0, int(torch.cuda.max_memory_allocated(device)) - before)
    from torch.profiler import ProfilerActivity, profile

    if torch._C._autograd._profiler_enabled():  # the user's own profiler, or an outer audit's: one at a time
        raise PeakUnmeasurable("another profiler is recording, so the CPU allocator's events cannot be")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        step()
    events = sorted((event.start_ns(), event.nbytes()) for event in profiler.profiler.kineto_results.events()
                    if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU)
    level = highest = 0
    for _, nbytes in events:
        level += nbytes
        highest = max(highest, level)
    return highest


def step_peak(step: Callable[[], Any], device: torch.device) -> int:
    """Held at the step's start (its own parts) plus its rise: its peak, whatever else shares the device."""
    held = held_bytes(step.parts, device)  # type: ignore[attr-defined]
    return held + rise_of(step, device)
