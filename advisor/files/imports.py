"""Run a callback right after a module is imported (the script may import it at any time, or never)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[Any], None]]] = {}
        self._finding: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None):
        if name not in self.callbacks or name in self._finding:
            return None
        self._finding.add(name)
        try:
            found = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if found is None or found.loader is None or not hasattr(found.loader, "exec_module"):
            return found
        load = found.loader.exec_module

        def exec_module(module):
            load(module)
            for callback in self.callbacks.pop(name, ()):  # taken when the module runs, not when looked up:
                callback(module)  # importlib.util.find_spec("torch") alone (sources.py does) must not use them
        found.loader.exec_module = exec_module
        return found


_FINDER = _AfterImport()


def when_imported(name: str, callback: Callable[[Any], None]) -> None:
    """``callback(module)`` once ``name`` is imported: now if it already is."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _FINDER.callbacks.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
