"""Token routing: how many rows each member of a group of sibling modules receives.

A group is a ModuleList or ModuleDict of at least two members of one class with identical
parameter shapes — the shape of a mixture of experts, and also of a plain stack of layers.
Forward pre-hooks count the rows (all dimensions but the last) of each member's first tensor
input. A stack of layers sees equal counts everywhere; a group is reported when its members
received different counts, which is what a router does, or when a router layer was seen
deciding for it (routers.py): then an expert never called counts as an idle expert. Where the
first batch called every member of every group with the same rows and the model has no layer
that could route, the groups are stacks and the other batches are not run.

The step's feed is used: the data loader's real batches when the file has a loader (routing
depends on the data), otherwise ``get_inputs()``, and the evidence says which.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from advisor.capture.routers import RouterWatch, router_candidates
from advisor.evidence import RoutingGroup
from advisor.sources import user_frame
from advisor.workload.target import Target, call_model, call_user


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
    model, feed, _ = target.fresh()
    batches = [inputs for inputs, _ in feed.items]  # the loader's real batches when the file has one
    source = "dataloader" if target.feed_source.source == "loader" else "synthetic"
    return route(model, batches, source,
                 lambda batch: call_user("routing", target.path, "the model's forward", call_model, model, batch))


def route(model: torch.nn.Module, batches: list[Any], source: str,
          forward: Callable[[Any], Any]) -> list[RoutingGroup]:
    """Tokens per member of each sibling group of ``model`` (a copy) over ``forward(batch)`` calls."""
    groups = sibling_groups(model)
    if not groups:
        return []
    tokens = {path: [0] * len(members) for path, members in groups.items()}
    varied: set[str] = set()
    seen_this_forward: dict[str, dict[int, int]] = {path: {} for path in groups}
    called_at: dict[str, tuple[str, int]] = {}
    candidates = router_candidates(model, groups)
    watch = RouterWatch(model, candidates)
    routers: dict[str, str] = {}

    def routed_before(path: str) -> None:  # a member is called: has one of its routers decided already?
        if path not in routers and (decided := [r for r in candidates.get(path, ()) if r in watch.decided_now]):
            routers[path] = decided[0]

    handles = []
    for path, members in groups.items():
        for index, member in enumerate(members):
            handles.append(member.register_forward_pre_hook(
                _counter(path, index, tokens, seen_this_forward, called_at, routed_before)))
    try:
        forwards = 0
        with torch.no_grad(), watch:
            for batch in batches:
                forwards += 1
                for counts in seen_this_forward.values():
                    counts.clear()
                forward(batch)
                watch.forget_outputs()
                for path, counts in seen_this_forward.items():
                    if len(set(counts.values())) > 1:
                        varied.add(path)  # equal counts, or members skipped whole (layer drop, a chosen head): no router
                if not varied and not routers and not any(candidates.values()) and all(
                        len(seen_this_forward[path]) == len(members) for path, members in groups.items()):
                    break  # every member of every group took the same rows and nothing could route: stacks of layers
    finally:
        watch.remove()
        for handle in handles:
            handle.remove()
    found = []
    for path in sorted(varied | set(routers)):  # with a router, an expert never called is an idle expert
        member = groups[path][0]
        file, line = called_at.get(path) or _defined_at(type(member))
        found.append(RoutingGroup(path=path, module_type=type(member).__qualname__, tokens=tokens[path],
                                  forwards=forwards, source=source, file=file, line=line,
                                  router=routers.get(path, "")))
    return found


def _counter(path: str, index: int, tokens: dict[str, list[int]], seen: dict[str, dict[int, int]],
             called_at: dict[str, tuple[str, int]], on_call: Callable[[str], None]):
    def count(module: torch.nn.Module, args: tuple) -> None:
        on_call(path)
        if path not in called_at and (where := user_frame()) is not None:
            called_at[path] = where  # the line that calls the experts (the dispatch loop)
        first = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
        rows = first.numel() // first.shape[-1] if first is not None and first.dim() > 0 and first.shape[-1] else 0
        tokens[path][index] += rows
        seen[path][index] = seen[path].get(index, 0) + rows
    return count


def _defined_at(cls: type) -> tuple[str, int]:
    try:
        return inspect.getsourcefile(cls) or "", inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return "", 0
