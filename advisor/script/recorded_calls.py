"""The model's real calls as the script made them, kept for the stages that must run the model again (the graph
capture, the routing count): each call's positional and keyword arguments."""

from __future__ import annotations

from typing import Any


class RecordedCall:
    """One real call of a module, as the script made it: its positional and keyword arguments, tensors detached and
    copied (the script may change its own in place afterwards). Graph capture and routing replay exactly this."""

    __slots__ = ("args", "kwargs")

    def __init__(self, args: tuple, kwargs: dict):
        self.args, self.kwargs = args, kwargs


def kept(value: Any) -> Any:
    """``value`` with every tensor in it detached and copied."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: v.detach().clone() if hasattr(v, "detach") else v, value)
