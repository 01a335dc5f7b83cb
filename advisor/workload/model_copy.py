"""A deep copy of the user's model that real libraries' models allow: results of autograd they keep on their
objects are copied detached (``model_copy``)."""

from __future__ import annotations

import copy
from typing import Any

import torch


def model_copy(model: Any, memo: dict | None = None) -> Any:
    """A deep copy of the user's model, for whatever runs it again (an audit's every stage and fix, a script's graph
    capture and routing). Tensors a real library keeps on its objects outside the parameters and buffers (the
    weight ``torch.nn.utils.weight_norm`` computes from its two parameters before every forward, REINFORCE's
    ``policy.saved_log_probs``, a distribution holding the last actions' log-probabilities, a cached hidden state)
    may be results of autograd, which deepcopy refuses wherever they sit: the copy holds them detached. Raises what
    the copy raises otherwise."""
    def detached(tensor: Any, memo: dict) -> Any:
        if tensor.grad_fn is None:
            return tensor.__deepcopy__(memo)
        copied = memo[id(tensor)] = tensor.detach().clone()
        return copied

    # deepcopy looks a type up in its dispatch table before the type's own __deepcopy__: plain tensors (autograd's
    # results are never Parameters) are copied detached for this one copy, wherever the model's objects hold them
    table = copy._deepcopy_dispatch  # noqa: SLF001 - the one hook deepcopy offers for a type it does not own
    previous = table.get(torch.Tensor)
    table[torch.Tensor] = detached
    try:
        return copy.deepcopy(model, memo)
    finally:
        if previous is None:
            table.pop(torch.Tensor, None)
        else:
            table[torch.Tensor] = previous
