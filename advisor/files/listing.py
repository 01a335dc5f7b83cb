"""Listings of folders the shadow changed: entries that may lie in different layers."""

from __future__ import annotations

import os

from advisor.files import intercept
from advisor.files.intercept import suspended


class Entry:
    """An ``os.DirEntry`` for a folder the shadow lists (its entries may lie in different layers)."""

    def __init__(self, name, path: str, canonical: str):
        self.name, self.path, self._canonical = name, path, canonical

    def _found(self) -> str:
        with suspended():
            found = intercept.LAYER.locate(self._canonical)
        if found is None:
            raise FileNotFoundError(2, os.strerror(2), self.path)
        return found

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        with suspended():
            found = intercept.LAYER.locate(self._canonical)
            return found is not None and (os.path.isdir(found) if follow_symlinks else
                                          os.path.isdir(found) and not os.path.islink(found))

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        with suspended():
            found = intercept.LAYER.locate(self._canonical)
            return found is not None and (os.path.isfile(found) if follow_symlinks else
                                          os.path.isfile(found) and not os.path.islink(found))

    def is_symlink(self) -> bool:
        with suspended():
            found = intercept.LAYER.locate(self._canonical)
            return found is not None and os.path.islink(found)

    def stat(self, *, follow_symlinks: bool = True):
        found = self._found()
        with suspended():
            return os.stat(found) if follow_symlinks else os.lstat(found)

    def inode(self) -> int:
        return self.stat(follow_symlinks=False).st_ino

    def is_junction(self) -> bool:
        return False

    def __fspath__(self):
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


class Listing:
    def __init__(self, entries: list[Entry]):
        self._entries = iter(entries)

    def __iter__(self):
        return self

    def __next__(self) -> Entry:
        return next(self._entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._entries = iter(())
