"""Pausing Python's cyclic garbage collector around allocation-heavy, cycle-free work."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic collector; reference counting still frees everything as usual.

    Parsing a trace and running the rules over it allocate hundreds of thousands of objects
    that form no cycles. Every few hundred allocations the collector would otherwise walk all
    live objects again: measured as a third of a million-event parse, and 15% of the rules'
    time on a 40,000-event trace.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
