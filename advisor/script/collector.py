"""Python's cyclic garbage collector inside an audited script's steps, in the script's process.

Every pass of the collector stops the script while it walks the objects of its generation; a full pass walks every
object that ever survived one. A loop that keeps thousands of tracked objects a step (per-sample records holding a
list, a dict of tensors) makes those passes longer and longer: a trainer keeping 1,024 such records a step spent
0.85 s of its 1.58 s in the collector over 300 steps (0.68 s with the collector off). ``gc.callbacks`` says when each
pass starts and stops; the time of the passes inside each timed step is what the ``gc-pauses`` rule reads.

Where those objects are made: over one warm-up step (never a timed one, nor the one before them) ``tracemalloc`` records where each
allocation is made; at the step's end every object the collector tracks that was made in it (it has a traceback)
is still alive, and its innermost line of the user's is counted. The line that makes most is where the fix goes.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections import Counter
from typing import Any

GENERATIONS = 3
TRACED_FRAMES = 16  # deep enough to reach the user's line through a library's helpers
SURVIVOR_SITES = 5


class CollectorWatch:
    """The collector's passes from its making on, their time summed per step (``step_ended``), and over the
    timed steps."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.step_ms = 0.0
        self.step_passes = [0] * GENERATIONS
        self.step_collected = 0
        self.per_step_ms: list[float] = []  # one per timed step, in the order the steps ran
        self.passes = [0] * GENERATIONS  # over the timed steps
        self.collected = 0  # objects the timed steps' passes freed (unreachable cycles)
        self.survivors: list[dict] = []  # where the objects one warm-up step made and kept were made, most first
        self.tracing = False
        gc.callbacks.append(self._event)

    def remove(self) -> None:
        if self._event in gc.callbacks:
            gc.callbacks.remove(self._event)

    def _event(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        if self.started is None:
            return
        self.step_ms += (time.perf_counter() - self.started) * 1000
        self.started = None
        generation = int(info.get("generation", GENERATIONS - 1))
        self.step_passes[min(generation, GENERATIONS - 1)] += 1
        self.step_collected += int(info.get("collected", 0))

    def step_ended(self, timed: bool) -> None:
        """A step ended: its passes count toward the timed steps' when it was one; the next step starts at zero."""
        if timed:
            self.per_step_ms.append(round(self.step_ms, 4))
            self.passes = [total + step for total, step in zip(self.passes, self.step_passes)]
            self.collected += self.step_collected
        self.step_ms, self.step_passes, self.step_collected = 0.0, [0] * GENERATIONS, 0

    def trace_step(self, count: int, warmup: int) -> None:
        """At a step's end (``count`` steps done): trace the allocations of the warm-up's last step but one and
        count its survivors (the last warm-up step then absorbs what the tracing left behind, before any step is
        timed). A warm-up of fewer than three steps has no such step: the survivors go untraced."""
        if count == warmup - 2 and count >= 1 and not self.tracing and not self.survivors and not tracemalloc.is_tracing():
            tracemalloc.start(TRACED_FRAMES)
            self.tracing = True
        elif count == warmup - 1 and self.tracing:
            self.tracing = False
            try:
                self.survivors = _survivor_sites()
            finally:
                tracemalloc.stop()

    def abandon_tracing(self) -> None:
        """Stop tracing allocations now, before the step does what is not a step's own (an optimizer made, Dynamo
        imported with it); a later warm-up step is traced instead, where the window still counts one."""
        if self.tracing:
            self.tracing = False
            tracemalloc.stop()

    def restart(self) -> None:
        """The window counts its steps again (an evaluation pass came first): what the timed steps held goes."""
        self.per_step_ms, self.passes, self.collected = [], [0] * GENERATIONS, 0

    def measured(self) -> dict[str, Any]:
        """What the timed steps' passes were, for ``window.json``."""
        return {"per_step_ms": list(self.per_step_ms), "passes": list(self.passes), "collected": self.collected,
                "thresholds": list(gc.get_threshold()), "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                "survivors": self.survivors}


def _survivor_sites() -> list[dict]:
    """The user's lines that made the tracked objects alive now, counted, most first (``file``, ``line``,
    ``objects``); an object made in a library on behalf of no line of the user's counts at the library's."""
    from advisor.sources import ADVISOR_DIR, is_library_path

    sites: Counter = Counter()
    for found in gc.get_objects():
        traceback = tracemalloc.get_object_traceback(found)
        if traceback is None:  # made before tracing began
            continue
        frames = [(frame.filename, frame.lineno) for frame in reversed(traceback)]  # innermost first (it is oldest first)
        user = next((frame for frame in frames if not is_library_path(frame[0])), None)
        if user is None and frames[0][0].startswith(ADVISOR_DIR):
            continue  # advisor's own objects
        sites[user or frames[0]] += 1
    return [{"file": file, "line": line, "objects": count} for (file, line), count in sites.most_common(SURVIVOR_SITES)]

