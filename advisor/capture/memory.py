"""What the step holds in memory, by kind, whether it grows, and what a larger batch would buy.

Tensor accounting, a few steps of the warmed-up copy, each storage counted once: parameters and the optimizer's
state from the live objects (L-BFGS's history among the state), the gradients as the optimizer's step finds them,
the activations from what the autograd graph saves for the backward during one step (``saved_tensors_hooks``,
parameters left out), the inputs from the feed. The peak is what the step starts with plus the most its allocations
rise over that step, by the allocator's own count (``workload/peak_memory.py``: the CUDA caching allocator's peak,
or the CPU allocator's events under the profiler), and what the kinds leave of it is the step's temporaries. Growth:
every tensor Python can reach (the collector's objects), less the kept kinds, summed before the first step and at
each step's end; memory still rising from step to step is a tensor history kept across steps, and the tensors the
first step made that are still alive after the last are counted at the user's line that made them (that step runs
under a torch function mode that notes, for each tensor a torch call returns, the user's line that made the call).
A tensor only C++ holds (a graph kept with ``retain_graph``) is not seen. The capacity is the device's memory on
CUDA, the memory the process holds and could still get on a CPU (the host's RAM, or the cgroup's limit where one binds).

A larger batch, measured: where the inputs have a batch dimension and the step is short enough, the step is
timed at twice the batch (its inputs repeated along the batch) and held against the audited batch's step as the
timing stage measured it, and the samples/s compared.
The whole stage costs a few steps: a first version over torch's memory profiler (its dataflow categories, from
stacks) took 27 s on a 64-layer GPT whose step takes 0.9 s; the allocator's events alone cost next to nothing.
"""

from __future__ import annotations

import gc
import os
import statistics
import weakref
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from advisor.evidence.memory_records import HeldMemory, LargerBatch, StepMemory
from advisor.sources import user_frame
from advisor.workload.feed import Feed
from advisor.workload.peak_memory import PEAK_METHOD, PeakUnmeasurable, held_bytes, input_tensors, kept_kinds, rise_of
from advisor.workload.step import make_step, synchronize
from advisor.workload.target import Target, batch_size
from advisor.workload.timing import timer_for

STEPS = 2  # the first traced; memory summed before it and after each: two rises to say it grows every step (the
# second step runs only where the first rose)
LARGER_BATCH_FACTOR, LARGER_BATCH_STEPS, LARGER_BATCH_WARMUP = 2, 3, 1
LARGER_BATCH_MOST_S = 0.5  # the larger batch is measured only where its steps fit in this
HELD_SITES = 5


def measure_memory(target: Target, step: Callable[[], Any], step_ms: float | None) -> StepMemory:
    device = target.device
    parts = getattr(step, "parts", None)
    memory = _accounted(step, parts, device, STEPS, target.path)
    memory.capacity_bytes, memory.capacity_kind = _capacity(device)
    if parts is not None and step_ms:
        memory.larger_batch = _larger_batch(target, parts, step_ms)
    return memory


def _accounted(step: Callable[[], Any], parts: tuple | None, device: torch.device, steps: int,
               model_file: str) -> StepMemory:
    model, feed, optimizer = parts if parts is not None else (None, None, None)
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        try:
            if tensor.device.type == device.type:
                storage = tensor.untyped_storage()
                saved[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # saved inside a compiled region: no data of its own here
            pass
        return tensor
    ends = [_live_bytes(device, _kept(model, optimizer))]
    gradients: dict[int, int] = {}
    hook = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: gradients.update(
        (p.grad.untyped_storage().data_ptr(), p.grad.untyped_storage().nbytes())
        for group in optimizer.param_groups for p in group["params"] if p.grad is not None))
    makers = _Makers(model_file)

    def first_step() -> None:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), makers:
            step()
    held = held_bytes(parts, device) if parts is not None else 0
    if device.type == "cuda":  # the earlier stages' copies left their blocks cached: the reserve is this step's alone
        torch.cuda.empty_cache()
    try:
        peak: int | None = held + rise_of(first_step, device)
    except PeakUnmeasurable:
        first_step()
        peak = None
    finally:
        hook.remove()
    synchronize(device)
    reserved = int(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else None  # since rise_of's reset
    kept = _kept(model, optimizer)
    after_first = _live_storages(device, kept)
    ends.append(sum(size for size, _ in after_first.values()))
    # what the first step made and left alive, each tensor itself (an address freed and reused is another's)
    left = {pointer: (weakref.ref(tensor), size, makers.made[pointer])
            for pointer, (size, tensor) in after_first.items() if pointer in makers.made}
    del after_first
    for _ in range(steps - 1):
        if ends[-1] <= ends[-2]:
            break  # the last step left no more behind than it began with: no step-to-step growth to confirm
        step()
        synchronize(device)
        ends.append(_live_bytes(device, kept))
    kinds = _kinds(model, optimizer, feed, saved, device, gradients)
    if peak is not None:
        kinds["temporaries"] = max(0, peak - sum(kinds.values()))
    growth = (ends[-1] - ends[0]) / (len(ends) - 1)
    return StepMemory(device=str(device), steps=len(ends) - 1, kinds={k: v for k, v in kinds.items() if v > 0},
                      peak_bytes=peak if peak is not None else sum(kinds.values()), reserved_bytes=reserved,
                      method=f"{PEAK_METHOD[device.type == 'cuda']}; tensors accounted by kind" if peak is not None
                      else "tensor accounting, the kinds summed (another profiler held the CPU allocator's events)",
                      step_end_bytes=ends, growth_bytes_per_step=growth,
                      held=_held(left) if growth > 0 else [])


def _kept(model: Any, optimizer: Any) -> set[int]:
    """The storages a step keeps by design: parameters, gradients, the optimizer's state."""
    return {tensor.untyped_storage().data_ptr() for _, tensors in kept_kinds(model, optimizer) for tensor in tensors}


def _kinds(model: Any, optimizer: Any, feed: Feed | None, saved: dict[int, int], device: torch.device,
           gradients: dict[int, int]) -> dict[str, int]:
    """Bytes by kind, each storage once (a storage of two kinds counts in the first). The gradients as the
    optimizer's step found them (the step's zero_grad may have let them go since)."""
    seen: set[int] = set()
    kinds: dict[str, int] = {}
    groups = [group for group in kept_kinds(model, optimizer) if group[0] != "gradients"]
    if feed is not None:
        groups.append(("inputs", input_tensors(feed)))
    for kind, tensors in groups:
        total = 0
        for tensor in tensors:
            storage = tensor.untyped_storage()
            if tensor.device.type == device.type and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        kinds[kind] = total
    kinds["gradients"] = sum(size for pointer, size in gradients.items() if pointer not in seen)
    seen.update(gradients)
    kinds["activations"] = sum(size for pointer, size in saved.items() if pointer not in seen)
    return kinds


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _live_storages(device: torch.device, kept: set[int]) -> dict[int, tuple[int, Any]]:
    """Every storage of a tensor Python can reach, less the kept ones: pointer -> (bytes, one tensor of it)."""
    found: dict[int, tuple[int, Any]] = {}
    for candidate in gc.get_objects():
        # by the object's type: isinstance would also ask a proxy's __class__ (a deprecated alias warns, a lazy
        # module's raises)
        if not issubclass(type(candidate), torch.Tensor):
            continue
        try:
            if candidate.device.type != device.type:
                continue
            storage = candidate.untyped_storage()
            pointer = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # a FakeTensor torch.compile left, a meta tensor: no data
            continue
        if pointer and pointer not in kept and pointer not in found:
            found[pointer] = (storage.nbytes(), candidate)
    return found


def _live_bytes(device: torch.device, kept: set[int]) -> int:
    return sum(size for size, _ in _live_storages(device, kept).values())


class _Makers(TorchFunctionMode):
    """Over one step: the storage of each tensor a torch call returns, and the user's line that made the call (the
    first call to make a storage; a call the harness or an optimizer's own code makes has no line of the user's)."""

    def __init__(self, model_file: str) -> None:
        super().__init__()
        self.model_file = model_file
        self.made: dict[int, tuple[str, int]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in _tensors(result):
            try:
                pointer = tensor.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                continue
            if pointer and pointer not in self.made and (place := user_frame(2)) is not None:
                self.made[pointer] = (_absolute(place[0], self.model_file), place[1])
        return result


def _held(left: dict[int, tuple[Any, int, tuple[str, int]]]) -> list[HeldMemory]:
    """The lines that made the tensors the first step left alive and that are still alive now, most bytes first."""
    sites: dict[tuple[str, int], list[int]] = {}
    for pointer, (tensor_ref, size, place) in left.items():
        tensor = tensor_ref()
        if tensor is not None and tensor.untyped_storage().data_ptr() == pointer:
            held = sites.setdefault(place, [0, 0])
            held[0] += size
            held[1] += 1
    ranked = sorted(sites.items(), key=lambda item: item[1][0], reverse=True)[:HELD_SITES]
    return [HeldMemory(file=file, line=line, bytes=size, tensors=count) for (file, line), (size, count) in ranked]


def _absolute(file: str, model_file: str) -> str:
    """A relative file is looked for beside the model file."""
    if not file or os.path.isabs(file):
        return file
    beside = os.path.join(os.path.dirname(os.path.abspath(model_file)), file)
    return beside if os.path.exists(beside) else os.path.abspath(file)


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
    """The step at LARGER_BATCH_FACTOR x the batch (the median of a few steps on the same model and optimizer, its
    first not timed) against the audited batch's step as the timing stage measured it."""
    model, feed, optimizer = parts
    size = batch_size(feed.inputs)
    if not size or (LARGER_BATCH_STEPS + LARGER_BATCH_WARMUP) * LARGER_BATCH_FACTOR * step_ms / 1000 > LARGER_BATCH_MOST_S:
        return None
    from torch.utils._pytree import tree_map

    def repeated(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == size:
            return torch.cat([value] * LARGER_BATCH_FACTOR)
        return value
    larger = Feed(items=tuple((tree_map(repeated, inputs), tree_map(repeated, batch)) for inputs, batch in feed.items))
    try:
        grown = _median_ms(make_step(target, model, larger, optimizer), target.device)
    except Exception:  # noqa: BLE001 - the model or its loss does not take a larger batch as it is fed
        return None
    return LargerBatch(factor=LARGER_BATCH_FACTOR, batch_size=size, step_ms=round(step_ms, 4),
                       larger_step_ms=round(grown, 4), steps=LARGER_BATCH_STEPS,
                       samples_per_s_ratio=round(LARGER_BATCH_FACTOR * step_ms / grown, 4) if grown > 0 else 0.0)


def _median_ms(step: Callable[[], Any], device: torch.device) -> float:
    """Timed as the timing stage times the audited batch's step (``workload/timing.py``)."""
    timed = timer_for(device)
    for _ in range(LARGER_BATCH_WARMUP):
        step()
    synchronize(device)
    return statistics.median(timed(step) for _ in range(LARGER_BATCH_STEPS))
