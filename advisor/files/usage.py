"""How much an experiment run's shadow holds, against its limit."""

from __future__ import annotations

import errno
import os
import stat
import weakref

from advisor.files.log import AppendLog


class Usage:
    """Bytes in the upper layer, against the limit. Files still open are measured when the next
    write asks for room; a closed one when it is closed."""

    def __init__(self, limit: int, upper: str, events: AppendLog):
        self.limit, self.upper, self.events = limit, upper, events
        self.sizes: dict[str, int] = {}
        self.open: dict[str, weakref.ref] = {}

    def track(self, handle, path: str) -> None:
        try:
            self.open[path] = weakref.ref(handle)
            weakref.finalize(handle, self.forget, path)
        except TypeError:
            pass

    def forget(self, path: str) -> None:
        """Measure ``path`` again (after a copy, a close or a removal)."""
        try:
            found = os.lstat(path)
            self.sizes[path] = found.st_size if stat.S_ISREG(found.st_mode) else 0
        except OSError:
            self.sizes.pop(path, None)
        self.open.pop(path, None)

    def reserve(self, path: str, size: int) -> None:
        """Room for ``size`` more bytes written to ``path``; ENOSPC when the shadow is already past its limit
        (the script went on writing through a file it held open) or would be."""
        for upper, ref in list(self.open.items()):
            handle = ref()
            try:
                self.sizes[upper] = os.fstat(handle.fileno()).st_size if handle is not None and not handle.closed else \
                    os.lstat(upper).st_size
            except (OSError, ValueError):
                self.sizes.pop(upper, None)
        held = sum(self.sizes.values())
        if held + size <= self.limit:
            return
        largest = max(self.sizes, key=self.sizes.get, default=None)
        if held > self.limit and largest is not None:  # the file that filled it, rather than the one asking now
            culprit, culprit_size = largest[len(self.upper):], self.sizes[largest]
        else:
            culprit, culprit_size = path, size
        message = (f"advisor's shadow of your files is full: {culprit} ({culprit_size / 1e6:.1f} MB) does not fit in "
                   f"its {self.limit / 1e6:.1f} MB limit (--shadow-limit)"
                   + (f"; the write of {path} was refused" if culprit != path else ""))
        self.events.append({"op": "full", "path": culprit, "size": culprit_size, "held": held, "limit": self.limit})
        raise OSError(errno.ENOSPC, message, path)
