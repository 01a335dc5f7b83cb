"""Which layer routes tokens to a group of experts.

A router is a ``nn.Linear`` beside the experts (under the same parent, outside the group) whose
output width is the number of experts and whose output goes straight into a routing decision —
argmax, topk, max, softmax or sigmoid — before the experts are called in the same forward (a
classifier of that width at the end of a layer stack decides nothing for the layers). Knowing it, an expert that is never called is an idle
expert (the router sent it nothing), not a head the model chose not to run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

ROUTING_DECISIONS = frozenset({
    torch.argmax, torch.topk, torch.max, torch.softmax, torch.sigmoid, F.softmax,
    torch.Tensor.argmax, torch.Tensor.topk, torch.Tensor.max, torch.Tensor.softmax, torch.Tensor.sigmoid,
})


def router_candidates(model: torch.nn.Module, groups: dict[str, list[torch.nn.Module]]) -> dict[str, list[str]]:
    """For each group path: the Linear layers of the group's width beside it, by path."""
    found: dict[str, list[str]] = {}
    for path, members in groups.items():
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        scope = model.get_submodule(parent) if parent else model
        for name, module in scope.named_modules():
            full = f"{parent}.{name}" if parent and name else (name or parent)
            if full == path or full.startswith(path + "."):
                continue
            if isinstance(module, torch.nn.Linear) and module.out_features == len(members):
                found.setdefault(path, []).append(full)
    return found


class RouterWatch(TorchFunctionMode):
    """Records which candidate routers' outputs feed a routing decision during forwards."""

    def __init__(self, model: torch.nn.Module, candidates: dict[str, list[str]]):
        super().__init__()
        self.outputs: dict[int, tuple[str, torch.Tensor]] = {}  # the tensor is kept so its id stays unique
        self.confirmed: set[str] = set()
        self.decided_now: set[str] = set()  # routers that decided in the current forward
        self.handles = []
        for path in {p for paths in candidates.values() for p in paths}:
            self.handles.append(model.get_submodule(path).register_forward_hook(self._recorder(path)))

    def _recorder(self, path: str):
        def record(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
            if isinstance(output, torch.Tensor):
                self.outputs[id(output)] = (path, output)
        return record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in ROUTING_DECISIONS and args and isinstance(args[0], torch.Tensor) \
                and (seen := self.outputs.get(id(args[0]))) is not None and seen[1] is args[0]:
            self.confirmed.add(seen[0])
            self.decided_now.add(seen[0])
        return func(*args, **(kwargs or {}))

    def forget_outputs(self) -> None:
        self.outputs.clear()
        self.decided_now.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
