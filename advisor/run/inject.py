"""Fixes the bootstrap can inject into an unmodified script, for ``advisor run``'s verification.

Each is applied in the script's own process before it builds anything (right after torch loads),
by the name the run verifier sends. Fixes that would need the script's objects by name
(autocast around a forward, torch.compile of a model) are not injected yet: their findings are
reported as expected.
"""

from __future__ import annotations

from typing import Any


def apply(fixes: list[dict[str, Any]]) -> None:
    for fix in fixes:
        INJECTORS[fix["name"]](**fix.get("options", {}))


def _zero_grad_to_none() -> None:
    import torch

    original = torch.optim.Optimizer.zero_grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        original(self, set_to_none=True)
    torch.optim.Optimizer.zero_grad = zero_grad


def _loader_options(**overrides: Any) -> None:
    from torch.utils.data import DataLoader

    original = DataLoader.__init__

    def init(self, *args, **kwargs):
        kwargs.update(overrides)
        if kwargs.get("num_workers", 0) == 0:
            kwargs.pop("prefetch_factor", None)
            kwargs["persistent_workers"] = False
        original(self, *args, **kwargs)
    DataLoader.__init__ = init


def _skip_saves() -> None:
    import torch

    torch.save = lambda *args, **kwargs: None


def _anomaly_off() -> None:
    import torch

    torch.autograd.set_detect_anomaly(False)
    torch.autograd.set_detect_anomaly = lambda *args, **kwargs: None


INJECTORS = {
    "zero_grad_to_none": _zero_grad_to_none,
    "loader_options": _loader_options,
    "skip_saves": _skip_saves,
    "anomaly_off": _anomaly_off,
}
