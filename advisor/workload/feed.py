"""What the audited step runs on: the loader's real batches, or ``get_inputs()``.

With a loader, ``BATCHES_AHEAD`` batches are fetched once, before anything is timed (the data
stage measures loading; the step timer must not), and each step takes the next of them in turn.
The model's inputs come from a batch by the file's ``inputs_from_batch(batch)``, by default the
batch's first element (a tuple or list batch) or the batch itself (a Tensor or a dict); when that
does not look like ``get_inputs()``, the one entry of the batch that does (``batch["features"]``
of a dict batch), as a person reading both would pick it. ``loss_fn(output, batch)`` always
receives the loader's whole batch. Without a loader, ``get_inputs()`` is both.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten, tree_map

BATCHES_AHEAD = 4
INPUTS_HOOK = "inputs_from_batch"


@dataclass(frozen=True)
class Feed:
    """(model inputs, whole batch) pairs on the audit device; a step cycles through them."""

    items: tuple[tuple[Any, Any], ...]

    @property
    def inputs(self) -> Any:
        """The first batch's model inputs (graph capture, routing)."""
        return self.items[0][0]

    def cycle(self) -> Iterator[tuple[Any, Any]]:
        return itertools.cycle(self.items)


@dataclass(frozen=True)
class FeedSource:
    """Where a target's step data came from, as the report tells it."""

    pairs: tuple[tuple[Any, Any], ...]  # host-side (inputs, batch), as fetched
    source: str  # "get_inputs()" or "loader"
    note: str = ""


def default_inputs(batch: Any) -> Any:
    """The model's inputs within a loader batch when the file says nothing: ``batch[0]`` or the batch."""
    if isinstance(batch, (tuple, list)) and batch:
        return batch[0]
    return batch


def looks_alike(a: Any, b: Any) -> bool:
    """The same tensors by dtype, rank and trailing dimensions (a tensor ``x`` and the tuple ``(x,)``
    call a model alike; a dict, passed as keyword arguments, only matches a dict)."""
    if isinstance(a, dict) != isinstance(b, dict):
        return False
    tensors_a = [t for t in tree_flatten(a)[0] if isinstance(t, torch.Tensor)]
    tensors_b = [t for t in tree_flatten(b)[0] if isinstance(t, torch.Tensor)]
    return len(tensors_a) == len(tensors_b) and all(
        x.dtype == y.dtype and x.dim() == y.dim() and x.shape[1:] == y.shape[1:] for x, y in zip(tensors_a, tensors_b))


def from_loader(
    batches: list[Any],
    to_inputs: Callable[[Any], Any],
    hooked: bool,
    fallback_inputs: Any | None,
) -> FeedSource:
    """The feed for a file with a loader; falls back to ``get_inputs()`` only when the default guess
    of the inputs (no ``inputs_from_batch``) does not look like what ``get_inputs()`` returns."""
    pairs = tuple((to_inputs(batch), batch) for batch in batches)
    if not hooked and fallback_inputs is not None and not looks_alike(pairs[0][0], fallback_inputs):
        entry = entry_like(batches[0], fallback_inputs)
        if entry is None:
            return FeedSource(
                pairs=((fallback_inputs, batches[0]),), source="get_inputs()",
                note=(f"the loader's batches ({describe(batches[0])}) hold no part shaped like get_inputs() "
                      f"({describe(fallback_inputs)}), so the model ran on get_inputs() (loss_fn on the loader's "
                      f"batch); define {INPUTS_HOOK}(batch) to run it on the real batches"))
        pairs = tuple((batch[entry], batch) for batch in batches)
        return FeedSource(pairs=pairs, source="loader",
                          note=(f"the step ran on {len(pairs)} batch(es) of the loader, fetched before timing; the "
                                f"model's input is batch[{entry!r}], the entry shaped like get_inputs()"))
    return FeedSource(pairs=pairs, source="loader",
                      note=f"the step ran on {len(pairs)} batch(es) of the loader, fetched before timing")


def entry_like(batch: Any, inputs: Any) -> Any:
    """The key (or index) of the one entry of a dict or tuple batch that looks like ``inputs``; None when
    none does, or several do (a guess between them would be a coin toss)."""
    if isinstance(batch, dict):
        entries = list(batch.items())
    elif isinstance(batch, (tuple, list)):
        entries = list(enumerate(batch))
    else:
        return None
    wanted = inputs[0] if isinstance(inputs, (tuple, list)) and len(inputs) == 1 else inputs
    found = [key for key, value in entries if looks_alike(value, wanted)]
    return found[0] if len(found) == 1 else None


def on_device(pairs: tuple[tuple[Any, Any], ...], device: torch.device,
              convert: Callable[[Any], Any] = lambda v: v) -> Feed:
    """Copies of the pairs on ``device``; a tensor shared by inputs and batch stays shared.
    ``convert`` (a layout fix) applies to the model inputs only."""
    items = []
    for inputs, batch in pairs:
        copy_one = _copier(device)
        batch_copy = tree_map(copy_one, batch)
        inputs_copy = tree_map(lambda v, copy_one=copy_one: convert(copy_one(v)), inputs)
        items.append((inputs_copy, batch_copy))
    return Feed(items=tuple(items))


def _copier(device: torch.device) -> Callable[[Any], Any]:
    """Copies tensors to ``device``, each tensor once however often it is met."""
    memo: dict[int, torch.Tensor] = {}

    def copy_one(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) not in memo:
            memo[id(value)] = value.detach().clone().to(device)
        return memo[id(value)]
    return copy_one


def describe(value: Any) -> str:
    """A batch in a few words: container and the dtype[shape] of each tensor."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    if isinstance(value, dict):
        return "dict(" + ", ".join(f"{k}={describe(v)}" for k, v in value.items()) + ")"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}(" + ", ".join(describe(v) for v in value) + ")"
    return type(value).__name__
