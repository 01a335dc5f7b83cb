"""Do the fixed copy and the baseline compute the same thing?

Inference: the outputs (any nesting of tensors in tuples, lists and dicts). Training: the loss
and every parameter's gradient after one forward and backward from identical weights (not the
optimizer's update: Adam-style updates are about +-lr whatever the gradient's size, so a tiny
gradient flipping sign in bf16 would look like a 100% error). Errors are reported as the largest absolute difference
and that difference over the baseline's largest magnitude (a scale-free relative error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten


@dataclass
class Comparison:
    max_abs_error: float
    max_rel_error: float
    baseline_finite: bool
    structure_matches: bool
    detail: str = ""

    def within(self, tolerance: float) -> bool:
        return self.baseline_finite and self.structure_matches and self.max_rel_error <= tolerance


# A fix's tolerance is set for a step in float32. A step that computes in a reduced precision rounds every
# operation to it, so the same computation reordered (fused, compiled, another kernel) differs by about its
# rounding, whatever the fix: bfloat16 keeps 8 bits of mantissa (0.4% per rounding), float16 11 (0.05%).
REDUCED_PRECISION_TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-3}


def tolerance_at(tolerance: float, precision: str | None) -> tuple[float, str]:
    """(the tolerance for a step computing in ``precision``, a note when it was raised for it)."""
    floor = REDUCED_PRECISION_TOLERANCE.get(precision or "", 0.0)
    if floor <= tolerance:
        return tolerance, ""
    return floor, f"the step computes in {precision}: its rounding, {floor:g}, is the tolerance, not the fix's {tolerance:g}"


def tensors_of(value: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [leaf.detach() for leaf in leaves if isinstance(leaf, torch.Tensor)]


def compare(baseline: list[torch.Tensor], candidate: list[torch.Tensor]) -> Comparison:
    if len(baseline) != len(candidate) or any(a.shape != b.shape for a, b in zip(baseline, candidate)):
        return Comparison(math.inf, math.inf, True, False,
                          f"outputs differ in structure: {[tuple(t.shape) for t in baseline]} vs "
                          f"{[tuple(t.shape) for t in candidate]}")
    finite = all(bool(torch.isfinite(t.float()).all()) for t in baseline if t.is_floating_point() or t.is_complex())
    max_abs, scale = 0.0, 0.0
    for a, b in zip(baseline, candidate):
        a64, b64 = a.double().cpu(), b.double().cpu()
        if a64.numel() == 0:
            continue
        max_abs = max(max_abs, float((a64 - b64).abs().max()))
        scale = max(scale, float(a64.abs().max()))
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    return Comparison(max_abs, rel, finite, True)


def outputs_after(step: Callable[[], Any]) -> list[torch.Tensor]:
    return [t.clone() for t in tensors_of(step())]


def gradients_after(backward_step: Callable[[], Any], model: torch.nn.Module) -> list[torch.Tensor]:
    """Loss and gradients of one forward + backward (no optimizer step); grads are then cleared."""
    loss = backward_step()
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    for parameter in model.parameters():
        parameter.grad = None
    return tensors_of(loss) + grads
