"""Which tensors the step makes on the host, so that reading one back is no device sync in any run.

A host sync costs only when the tensor read would live on the device when the script runs on one: made
by the model, moved with ``.to(device)``, created with the run's device. A tensor made by a factory
without a device argument (``torch.randint(n, (b,))``, ``torch.tensor([...])``, ``torch.from_numpy``)
lives on the host in a GPU run too, and so does whatever is computed from host tensors alone; reading it
(``int(i)``, a NumPy slice indexed with it) waits for nothing. Tensors made before the profiled steps,
the model's parameters and its outputs are never called host-made: the rule counts them, as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from advisor.opnames import HOST_FACTORIES, TO_DEVICE_APIS, TO_HOST_APIS


class HostTensors:
    """The host-made tensors of the profiled steps (weakly held: the step's tensors are freed as usual)."""

    def __init__(self) -> None:
        self._made: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __contains__(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor in self._made

    def reads_host_tensor(self, args: tuple) -> bool:
        """Whether a read (``.item()``, ``__index__``) is of a host-made tensor."""
        return bool(args) and args[0] in self

    def note(self, api: str, args: tuple, kwargs: dict, result: Any) -> None:
        """Mark ``result`` host-made when the call made it on the host."""
        if not self._made and api not in HOST_FACTORIES and api not in TO_HOST_APIS:
            return  # nothing host-made yet: nothing computed from it (the usual step, at no cost)
        if api in HOST_FACTORIES:
            host = kwargs.get("device") is None
        elif api in TO_HOST_APIS:
            host = True
        elif api in TO_DEVICE_APIS:
            host = api == "Tensor.to" and not _names_a_device(args[1:], kwargs) and args[0] in self
        else:
            tensors = _tensors(args, kwargs)
            host = bool(tensors) and all(t in self._made for t in tensors)
        for tensor in _results(result):
            if host:
                self._made[tensor] = True
            elif tensor in self._made:
                del self._made[tensor]  # written in place with device values


def _names_a_device(args: tuple, kwargs: dict) -> bool:
    given = [*args, kwargs.get("device")]
    return any(isinstance(a, (torch.device, str, int)) and not isinstance(a, bool) or isinstance(a, torch.Tensor)
               for a in given if a is not None)


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _results(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [r for r in result if isinstance(r, torch.Tensor)]
    return []
