"""An append-only JSON-lines file that every process of a run writes and the parent reads."""

from __future__ import annotations

import json
import os


class AppendLog:
    def __init__(self, path: str):
        self.path = path
        self._seen: set[tuple] = set()

    def append(self, entry: dict) -> None:
        """One write in append mode, so the lines of several processes never interleave. A failure is
        advisor's, never the user's: the entry is dropped."""
        line = (json.dumps({"pid": os.getpid(), **entry}) + "\n").encode("utf-8", "surrogateescape")
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return
        try:
            os.write(descriptor, line)
        except OSError:
            pass
        finally:
            os.close(descriptor)

    def once(self, op: str, path: str, **fields) -> None:
        """The first ``op`` on ``path`` by this process; repeats (a log appended every step) are not logged."""
        if (op, path) in self._seen:
            return
        self._seen.add((op, path))
        self.append({"op": op, "path": path, **fields})


def read_log(path: str, offset: int = 0) -> tuple[list[dict], int]:
    """The entries from byte ``offset`` on, and the offset after the last whole line."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    entries = []
    for line in data[:end].splitlines():
        try:
            entries.append(json.loads(line.decode("utf-8", "surrogateescape")))
        except ValueError:
            continue
    return entries, offset + end
