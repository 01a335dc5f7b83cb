"""Token routing: how many rows each member of a group of sibling modules receives.

A group is a ModuleList or ModuleDict of at least two members of one class with identical
parameter shapes — the shape of a mixture of experts, and also of a plain stack of layers.
Forward pre-hooks count the rows (all dimensions but the last) of each member's first tensor
input. A stack of layers sees equal counts everywhere; a group is reported only when its
members received different counts, which is what a router does.

The data loader's batches are used when they fit the model's inputs (routing depends on the
data); otherwise ``get_inputs()``, and the evidence says so.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from advisor.evidence import RoutingGroup
from advisor.sources import user_frame
from advisor.target import Target, call_model, call_user

LOADER_BATCHES = 8  # real batches fed through the model, when the loader's batches fit


def sibling_groups(model: torch.nn.Module) -> dict[str, list[torch.nn.Module]]:
    groups = {}
    for path, container in model.named_modules():
        if not isinstance(container, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            continue
        members = list(container.children())
        if len(members) < 2 or len({type(m) for m in members}) != 1:
            continue
        shapes = {tuple(tuple(p.shape) for p in m.parameters()) for m in members}
        if len(shapes) == 1:
            groups[path] = members
    return groups


def measure_routing(target: Target) -> list[RoutingGroup]:
    model, inputs, _ = target.fresh()
    groups = sibling_groups(model)
    if not groups:
        return []
    batches, source = _batches(target, inputs)
    tokens = {path: [0] * len(members) for path, members in groups.items()}
    varied: set[str] = set()
    seen_this_forward: dict[str, dict[int, int]] = {path: {} for path in groups}
    called_at: dict[str, tuple[str, int]] = {}
    handles = []
    for path, members in groups.items():
        for index, member in enumerate(members):
            handles.append(member.register_forward_pre_hook(
                _counter(path, index, tokens, seen_this_forward, called_at)))
    try:
        with torch.no_grad():
            for batch in batches:
                for counts in seen_this_forward.values():
                    counts.clear()
                call_user("routing", target.path, "the model's forward", call_model, model, batch)
                for path, counts in seen_this_forward.items():
                    if len(set(counts.values())) > 1:
                        varied.add(path)  # equal counts, or members skipped whole (layer drop, a chosen head): no router
    finally:
        for handle in handles:
            handle.remove()
    found = []
    for path in sorted(varied):
        member = groups[path][0]
        file, line = called_at.get(path) or _defined_at(type(member))
        found.append(RoutingGroup(path=path, module_type=type(member).__qualname__, tokens=tokens[path],
                                  forwards=len(batches), source=source, file=file, line=line))
    return found


def _counter(path: str, index: int, tokens: dict[str, list[int]], seen: dict[str, dict[int, int]],
             called_at: dict[str, tuple[str, int]]):
    def count(module: torch.nn.Module, args: tuple) -> None:
        if path not in called_at and (where := user_frame()) is not None:
            called_at[path] = where  # the line that calls the experts (the dispatch loop)
        first = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
        rows = first.numel() // first.shape[-1] if first is not None and first.dim() > 0 and first.shape[-1] else 0
        tokens[path][index] += rows
        seen[path][index] = seen[path].get(index, 0) + rows
    return count


def _batches(target: Target, inputs: Any) -> tuple[list[Any], str]:
    """Loader batches reshaped like ``get_inputs()`` when they fit; else the synthetic inputs."""
    if target.get_dataloader is not None:
        try:
            loader = target.loader()
            fitted = [fit for batch in itertools.islice(iter(loader), LOADER_BATCHES)
                      if (fit := _fit(batch, inputs)) is not None]
        except Exception:  # noqa: BLE001 - the data stage reports loader failures
            fitted = []
        if fitted:
            device = target.device
            return [tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, b) for b in fitted], \
                "dataloader"
    return [inputs], "synthetic"


def _fit(batch: Any, inputs: Any) -> Any:
    """The part of a loader batch shaped like the model inputs (features of a (features, labels) pair)."""
    wanted = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    have = [t for t in tree_flatten(batch)[0] if isinstance(t, torch.Tensor)]

    def like(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.dtype == b.dtype and a.dim() == b.dim() and a.shape[1:] == b.shape[1:]

    if len(wanted) == 1:
        match = next((t for t in have if like(t, wanted[0])), None)
        if match is None:
            return None
        return (match,) if isinstance(inputs, (tuple, list)) else match
    if isinstance(inputs, (tuple, list)) and len(have) >= len(wanted) and all(map(like, have, wanted)):
        return tuple(have[:len(wanted)])
    return None


def _defined_at(cls: type) -> tuple[str, int]:
    try:
        return inspect.getsourcefile(cls) or "", inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return "", 0
