"""Floating-point work of one step, counted by torch.utils.flop_counter.FlopCounterMode."""

from __future__ import annotations

from typing import Any, Callable

from torch.utils.flop_counter import FlopCounterMode

from advisor.evidence import FlopCount


def count_flops(step: Callable[[], Any]) -> FlopCount:
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    by_op: dict[str, int] = {}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():  # absent when nothing counted
        parts = str(op).split(".")  # "aten.addmm" or "aten.addmm.default"
        name = parts[1] if len(parts) > 1 else parts[0]
        by_op[name] = by_op.get(name, 0) + int(flops)
    return FlopCount(total=int(counter.get_total_flops()), by_op=by_op)
