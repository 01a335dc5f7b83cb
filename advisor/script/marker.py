"""``--step-marker``: the named function's every return ends a step; a name that matches nothing is said.

The function (``qualname`` in the script, or ``module:qualname``) is wrapped at its first call: a profile
function watches calls only until then, so the window costs nothing after. While it watches it keeps the
names of the user's own functions it sees called, so that a marker that never matches (a misspelt name)
can be answered with the names that would have: once the script has run its warm-up's worth of steps of
its own (optimizer steps, or outermost forwards in a script with no optimizer) without one call of the
marker, the window says so and stops the script (``marker_unmatched.json``; advisor exits 2). A script
that ends before that says so too.
"""

from __future__ import annotations

import sys
from typing import Callable

from advisor.script.window_state import WindowState
from advisor.sources import is_library_path

MOST_NAMES_KEPT = 40


class MarkerWatch:
    def __init__(self, state: WindowState, marker: str):
        self.state = state
        self.marker = marker
        self.matched = False
        self.seen: dict[str, None] = {}  # the user's functions called so far, in order of first call
        self.own_steps = 0  # the script's own step boundaries while the marker matched nothing

    def install(self, on_return: Callable[[], None]) -> None:
        module, _, qualname = self.marker.rpartition(":")
        watch_state = self

        def wrap(function):
            def marked(*args, **kwargs):
                try:
                    return function(*args, **kwargs)
                finally:
                    on_return()
            marked.__wrapped__ = function
            return marked

        def watch(frame, event, arg):
            if event != "call":
                return
            code = frame.f_code
            if code.co_qualname != qualname or (module and frame.f_globals.get("__name__") != module):
                if len(watch_state.seen) < MOST_NAMES_KEPT and not code.co_name.startswith("<") \
                        and not is_library_path(code.co_filename):
                    name = frame.f_globals.get("__name__", "")
                    label = code.co_qualname if name == "__main__" else f"{name}:{code.co_qualname}"
                    watch_state.seen.setdefault(label, None)
                return
            watch_state.matched = True
            sys.setprofile(None)
            owner_name, _, attribute = qualname.rpartition(".")
            owner = frame.f_globals.get(owner_name) if owner_name else None
            if owner_name and owner is not None and hasattr(owner, attribute):
                setattr(owner, attribute, wrap(getattr(owner, attribute)))
            elif not owner_name and qualname in frame.f_globals:
                frame.f_globals[qualname] = wrap(frame.f_globals[qualname])  # later calls; this one is a warm-up

        sys.setprofile(watch)

    def own_step(self) -> bool:
        """One of the script's own step boundaries (not the marker's) ended. True when the warm-up's worth
        has passed with no call of the marker: the window then writes what it saw, and the script stops."""
        if self.matched:
            return False
        self.own_steps += 1
        if self.own_steps < max(1, self.state.warmup):
            return False
        self.say_unmatched()
        return True

    def say_unmatched(self) -> None:
        """What the window tells advisor when the marker matched nothing (the run ended, or ran its own
        warm-up's worth of steps): the names it could have been."""
        sys.setprofile(None)
        self.state.write("marker_unmatched.json", {"marker": self.marker, "own_steps": self.own_steps,
                                                   "seen": list(self.seen)})
