"""Whether the user's code already runs the model under autocast, and in which dtype.

A global forward pre-hook reads the autocast state as each module starts: an autocast region
the user opened inside ``forward`` (or around it, in a script) shows there, one the user only
wrote in dead code does not.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Callable, Iterator

import torch

DEVICE_TYPES = ("cuda", "cpu")


def autocast_dtype_now() -> str | None:
    """The dtype of the innermost autocast region active right now (cuda first), else None."""
    for device_type in DEVICE_TYPES:
        if _enabled(device_type):
            return str(_dtype(device_type)).replace("torch.", "")
    return None


def step_precision(model: torch.nn.Module) -> str | None:
    """The reduced precision this call of the model computes in: an autocast region around it, else its
    parameters' dtype when that is bfloat16 or float16; None in float32."""
    from advisor.workload.reduced_precision import parameter_precision

    active = autocast_dtype_now()
    return active if active in ("bfloat16", "float16") else parameter_precision(model)


def watch_precision(model: torch.nn.Module) -> tuple[list[str], Callable[[], None]]:
    """(the reduced precisions the model's modules compute in from now on, a function that stops watching).
    Read at each module's call, inside the model's forward: an autocast region entered there, or around the
    forward by a wrapper (accelerate installs one as the model's ``forward``), is seen, not only one around it."""
    seen: list[str] = []

    def record(module: torch.nn.Module, args: Any) -> None:
        if (found := step_precision(module)) is not None and found not in seen:
            seen.append(found)
    handles = [module.register_forward_pre_hook(record) for module in model.modules()]

    def stop() -> None:
        for handle in handles:
            handle.remove()
    return seen, stop


def _enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: one function per device
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _dtype(device_type: str) -> torch.dtype:
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device_type)
    return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()


@contextlib.contextmanager
def watching_autocast() -> Iterator[Counter]:
    """Count, per autocast dtype (None: no autocast), the module calls made inside the block."""
    seen: Counter = Counter()

    def hook(module, args):
        seen[autocast_dtype_now()] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def step_autocast(seen: Counter) -> str | None:
    """The autocast dtype most module calls ran under, when at least half of them did."""
    under = Counter({dtype: n for dtype, n in seen.items() if dtype is not None})
    if not under or sum(under.values()) * 2 < sum(seen.values()):
        return None
    return under.most_common(1)[0][0]
