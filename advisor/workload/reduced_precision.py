"""The reduced precision a model computes in by its own weights (bfloat16, float16), or None in float32."""

from __future__ import annotations

import torch

REDUCED = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def parameter_precision(model: torch.nn.Module) -> str | None:
    first = next(model.parameters(), None)
    return REDUCED.get(first.dtype) if first is not None else None
