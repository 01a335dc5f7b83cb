"""Floating-point work of one step, counted by torch.utils.flop_counter.FlopCounterMode.

Counting must never cost the audit its step: when the counter fails on the whole step (its
module tracker asserts on some models' outputs), a training step is estimated from its forward
(backward ~ 2x forward, the usual rule for matmul-dominated models), and when even that fails
the count is recorded as unavailable, with why.
"""

from __future__ import annotations

from typing import Any, Callable

from torch.utils.flop_counter import FlopCounterMode

from advisor.evidence import FlopCount

BACKWARD_TO_FORWARD = 2.0


def count_flops(step: Callable[[], Any], forward: Callable[[], Any] | None = None) -> FlopCount:
    """Count ``step``; on failure, ``forward`` (training) scaled to a step, or nothing."""
    try:
        return _counted(step)
    except Exception as whole:  # noqa: BLE001 - the counter's own failures, not the model's
        why = f"counting the whole step failed ({_said(whole)})"
    if forward is not None:
        try:
            counted = _counted(forward)
        except Exception as forward_failure:  # noqa: BLE001
            why += f"; counting the forward alone failed too ({_said(forward_failure)})"
        else:
            return as_training_step(counted, why + "; the step is estimated as 3x its forward")
    return FlopCount(method="none", note=why)


def as_training_step(forward: FlopCount, note: str) -> FlopCount:
    """A training step's work estimated from its forward's (backward ~ 2x forward)."""
    scale = 1 + BACKWARD_TO_FORWARD
    return FlopCount(total=int(forward.total * scale), by_op={k: int(v * scale) for k, v in forward.by_op.items()},
                     method="forward x3", note="; ".join(part for part in (note, forward.note) if part))


def repeated(forward: FlopCount, times: int, note: str) -> FlopCount:
    """The work of ``times`` forwards in one step (the micro-steps of gradient accumulation)."""
    return FlopCount(total=forward.total * times, by_op={k: v * times for k, v in forward.by_op.items()},
                     method=forward.method, note="; ".join(part for part in (forward.note, note) if part))


def _counted(run: Callable[[], Any]) -> FlopCount:
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    by_op: dict[str, int] = {}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():  # absent when nothing counted
        parts = str(op).split(".")  # "aten.addmm" or "aten.addmm.default"
        name = parts[1] if len(parts) > 1 else parts[0]
        by_op[name] = by_op.get(name, 0) + int(flops)
    return FlopCount(total=int(counter.get_total_flops()), by_op=by_op)


def _said(failure: BaseException) -> str:
    text = str(failure).strip().splitlines()
    return f"{type(failure).__name__}: {text[0]}" if text else type(failure).__name__
