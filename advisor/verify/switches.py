"""Step contexts for fixes: a library flag or an API changed only while a candidate step runs.

Baseline and candidate run interleaved in one process, so a fix must never leave a global
changed: each switch sets its value on entry and restores the previous one on exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator


def with_switches(target: Any, *switches: Callable[[], contextlib.AbstractContextManager]) -> Any:
    """A new Target whose steps run inside these switches as well (the given one is not changed)."""
    return dataclasses.replace(target, step_contexts=(*target.step_contexts, *switches))


def attribute(owner: Any, name: str, value: Any) -> Callable[[], contextlib.AbstractContextManager]:
    """``owner.name = value`` during the step (``torch.backends.cudnn``, ``"benchmark"``, True)."""
    @contextlib.contextmanager
    def switched() -> Iterator[None]:
        previous = getattr(owner, name)
        setattr(owner, name, value)
        try:
            yield
        finally:
            setattr(owner, name, previous)
    return switched


def setting(get: Callable[[], Any], put: Callable[[Any], None], value: Any) -> Callable[[], contextlib.AbstractContextManager]:
    """A setting behind getter and setter functions (``torch.get_num_threads`` / ``set_num_threads``)."""
    @contextlib.contextmanager
    def switched() -> Iterator[None]:
        previous = get()
        put(value)
        try:
            yield
        finally:
            put(previous)
    return switched


def silenced(owner: Any, name: str, result: Any = None) -> Callable[[], contextlib.AbstractContextManager]:
    """Replace the function ``owner.name`` by one that does nothing and returns ``result``.

    Measures what a call costs the step (a synchronous ``torch.save``): the gain of moving it
    off the step, as an upper bound.
    """
    return attribute(owner, name, lambda *args, **kwargs: result)
