"""What an experiment run deleted: hidden below its own writes, for every process of the run."""

from __future__ import annotations

import os

from advisor.files.log import AppendLog, read_log
from advisor.files.scope import ancestors, self_and_ancestors


class Whiteouts:
    """Paths this run deleted, shared by its processes through an append-only log."""

    def __init__(self, path: str):
        self.log = AppendLog(path)
        self.paths: set[str] = set()
        self.holding: set[str] = set()  # folders with a deletion below them
        self._offset = 0

    def refresh(self) -> None:
        try:
            size = os.stat(self.log.path).st_size
        except FileNotFoundError:
            return
        if size != self._offset:
            entries, self._offset = read_log(self.log.path, self._offset)
            for entry in entries:
                self._add(entry["path"])

    def add(self, path: str) -> None:
        if path not in self.paths:
            self._add(path)
            self.log.append({"path": path})

    def _add(self, path: str) -> None:
        self.paths.add(path)
        self.holding.update(ancestors(path))

    def covers(self, path: str) -> bool:
        self.refresh()
        return bool(self.paths) and any(p in self.paths for p in self_and_ancestors(path))
