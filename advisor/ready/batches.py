"""Inputs of a given batch size, from the model file: its ``make_inputs(batch_size)`` hook, or
``get_inputs()`` with every tensor's first dimension resized (cut, or repeated and cut)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

BATCH_HOOK = "make_inputs"


def batch_maker(target: Any) -> Callable[[int], Any]:
    from advisor.workload.target import call_user, check_inputs

    hook = getattr(target.module, BATCH_HOOK, None) if target.module is not None else None
    if hook is not None and callable(hook):
        return lambda size: check_inputs(call_user("ready", target.path, f"{BATCH_HOOK}({size})", hook, size),
                                         f"{BATCH_HOOK}({size}) returned")
    return lambda size: resized(target.inputs, size)


def resized(inputs: Any, size: int) -> Any:
    def resize(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            return value
        rows = value.shape[0]
        if rows >= size:
            return value[:size].clone()
        return torch.cat([value] * math.ceil(size / rows))[:size]
    return tree_map(resize, inputs)


def batch_size_of(inputs: Any) -> int | None:
    """The first dimension of the first tensor input."""
    from torch.utils._pytree import tree_flatten

    for leaf in tree_flatten(inputs)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return None
