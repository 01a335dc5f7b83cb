"""The shadow: a copy-on-write view of the user's files for a run advisor starts as an experiment.

Three layers, looked up in order for a path:

1. ``upper``: what this run wrote, under ``<folder>/upper/<path>``; a file opened for writing or
   appending is copied here first (and the copy is what the run then reads);
2. the run's deletions (``whiteouts.log``: deletes, renames and removed trees hide what lies
   below; a folder re-created after its removal shows only what the run wrote into it);
3. the base: the files as they were when the audited run began, from its journal's claims
   (``Base``), else the disk as it is.

Reads of files the run did not write go straight to the disk (datasets are never copied).
Everything the run wrote is thrown away with the folder. The upper layer is bounded: a write that
would pass ``limit_bytes`` fails with ENOSPC naming the user's file.
"""

from __future__ import annotations

import errno
import os
import shutil

from advisor.files.base import Base
from advisor.files.log import AppendLog
from advisor.files.scope import Scope
from advisor.files.usage import Usage
from advisor.files.whiteouts import Whiteouts

EVENTS_LOG = "events.jsonl"
WHITEOUTS_LOG = "whiteouts.log"


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, os.strerror(code), path)


class Shadow:
    mode = "shadow"
    routes_reads = True

    def __init__(self, folder: str, journal: str | None, limit_bytes: int, passthrough: list[str]):
        self.upper = os.path.join(folder, "upper")
        os.makedirs(self.upper, exist_ok=True)
        self.scope = Scope([folder, *([journal] if journal else []), *passthrough])
        self.base = Base.load(journal)
        self.whiteouts = Whiteouts(os.path.join(folder, WHITEOUTS_LOG))
        self.events = AppendLog(os.path.join(folder, EVENTS_LOG))
        self.usage = Usage(limit_bytes, self.upper, self.events)

    # --- the layers --------------------------------------------------------------------------
    def up(self, path: str) -> str:
        return self.upper + path

    def lower(self, path: str) -> str | None:
        """The path below this run's own writes: None when deleted, or absent when the audited run began."""
        if self.whiteouts.covers(path):
            return None
        return self.base.lower(path)

    def locate(self, path: str) -> str | None:
        upper = self.up(path)
        if os.path.lexists(upper):
            return upper
        low = self.lower(path)
        return low if low is not None and os.path.lexists(low) else None

    def _existing(self, path: str) -> str:
        found = self.locate(path)
        if found is None:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        return found

    def _is_dir(self, path: str) -> bool:
        found = self.locate(path)
        return found is not None and os.path.isdir(found)

    def _touched(self, path: str) -> bool:
        """Whether a folder's listing differs from the disk's."""
        self.whiteouts.refresh()
        return (os.path.lexists(self.up(path)) or path in self.whiteouts.holding or path in self.whiteouts.paths
                or path in self.base.touched or path in self.base.children)

    def _writable_here(self, path: str, existing: str | None) -> None:
        """A write the disk would refuse is refused in the shadow too (a read-only mount, a folder the
        user may not write): the run must fail as the real one would, not succeed in the copy."""
        if existing is not None and existing != path:
            return  # an earlier write of this run, or the audited run's copy: writable
        where = path if existing is not None else os.path.dirname(path)
        if self.locate(where) != where:
            return  # the folder itself is the run's own
        try:
            if os.statvfs(where).f_flag & os.ST_RDONLY:
                raise _error(OSError, errno.EROFS, path)
        except FileNotFoundError:
            return
        if not os.access(where, os.W_OK):
            raise _error(PermissionError, errno.EACCES, path)

    def _place(self, path: str) -> str:
        """The upper path for ``path``, its folders made."""
        upper = self.up(path)
        os.makedirs(os.path.dirname(upper), exist_ok=True)
        return upper

    def _remove_upper(self, path: str) -> None:
        upper = self.up(path)
        if os.path.isdir(upper) and not os.path.islink(upper):
            shutil.rmtree(upper)
        elif os.path.lexists(upper):
            os.unlink(upper)
        self.usage.forget(upper)

    def _copy_up(self, source: str, path: str, upper: str) -> None:
        if os.path.islink(source) and not os.path.exists(source):
            os.symlink(os.readlink(source), upper)
            return
        self.usage.reserve(path, os.stat(source).st_size)
        shutil.copy2(source, upper)
        self.usage.forget(upper)

    # --- what interposition asks ------------------------------------------------------------
    def for_read(self, path: str) -> str | None:
        found = self._existing(path)
        return None if found == path else found

    def for_write(self, path: str, keep: bool, exclusive: bool) -> str | None:
        self.usage.reserve(path, 0)  # a shadow already past its limit takes no further write
        upper = self.up(path)
        if os.path.lexists(upper):
            if exclusive:
                raise _error(FileExistsError, errno.EEXIST, path)
            return upper
        low = self.lower(path)
        existing = low if low is not None and os.path.lexists(low) else None
        if existing is not None and exclusive:
            raise _error(FileExistsError, errno.EEXIST, path)
        if existing is not None and os.path.isdir(existing):
            return None if existing == path else existing  # opening a folder to write: the open refuses it
        if not self._is_dir(os.path.dirname(path)):
            raise _error(FileNotFoundError, errno.ENOENT, path)
        self._writable_here(path, existing)
        upper = self._place(path)
        if keep and existing is not None:
            self._copy_up(existing, path, upper)
        self.events.once("write", path)
        return upper

    def opened(self, path: str, target: str | None, handle) -> None:
        if target is not None and target.startswith(self.upper + "/"):
            self.usage.track(handle, target)

    def remove(self, path: str, run) -> None:
        found = self._existing(path)
        if os.path.isdir(found) and not os.path.islink(found):
            raise _error(IsADirectoryError, errno.EISDIR, path)
        self._writable_here(path, None)  # removing an entry takes the folder's permission
        self._remove_upper(path)
        self.whiteouts.add(path)
        self.events.once("delete", path)

    def rmdir(self, path: str, run) -> None:
        found = self._existing(path)
        if not os.path.isdir(found) or os.path.islink(found):
            raise _error(NotADirectoryError, errno.ENOTDIR, path)
        if self._names(path):
            raise _error(OSError, errno.ENOTEMPTY, path)
        self._writable_here(path, None)
        self._remove_upper(path)
        self.whiteouts.add(path)
        self.events.once("delete", path)

    def rmtree(self, path: str, run) -> None:
        found = self._existing(path)
        if os.path.islink(found):
            raise OSError("Cannot call rmtree on a symbolic link")
        if not os.path.isdir(found):
            raise _error(NotADirectoryError, errno.ENOTDIR, path)
        self._writable_here(path, None)
        self._remove_upper(path)
        self.whiteouts.add(path)
        self.events.once("delete", path)

    def rename(self, source: str, destination: str, run) -> None:
        found = self._existing(source)
        if source == destination:
            return
        if not self._is_dir(os.path.dirname(destination)):
            raise _error(FileNotFoundError, errno.ENOENT, destination)
        is_dir = os.path.isdir(found) and not os.path.islink(found)
        if (there := self.locate(destination)) is not None:
            there_dir = os.path.isdir(there) and not os.path.islink(there)
            if is_dir and not there_dir:
                raise _error(NotADirectoryError, errno.ENOTDIR, destination)
            if there_dir and not is_dir:
                raise _error(IsADirectoryError, errno.EISDIR, destination)
            if there_dir and self._names(destination):
                raise _error(OSError, errno.ENOTEMPTY, destination)
        self._writable_here(source, None)
        self._writable_here(destination, None)
        self._remove_upper(destination)
        target = self._place(destination)
        upper = self.up(source)
        if found == upper and (not is_dir or self._lower_missing(source)):
            os.rename(upper, target)  # all of it is the run's own: a rename within the shadow
        elif is_dir:
            self._materialize(source, target)
            self._remove_upper(source)
        elif os.path.islink(found):
            os.symlink(os.readlink(found), target)
            self._remove_upper(source)
        else:
            self._copy_up(found, destination, target)
            self._remove_upper(source)
        self.usage.forget(upper)
        self.whiteouts.add(destination)  # what lay below the destination is replaced
        self.whiteouts.add(source)
        self.events.once("delete", source)
        self.events.once("write", destination)

    def adopt(self, source: str, destination: str, run) -> None:
        """A file moved in from outside the user's files (a temporary file renamed into place)."""
        target = self._new_entry(destination, replacing=True)
        os.rename(source, target)
        self.usage.forget(target)
        self.whiteouts.add(destination)

    def release(self, source: str, destination: str, run) -> None:
        """A file of the user's moved out (into a temporary folder): a copy leaves, the view loses it."""
        found = self._existing(source)
        self._writable_here(source, None)
        if os.path.isdir(found) and not os.path.islink(found):
            self._materialize(source, destination)
        elif found.startswith(self.upper + "/"):
            os.rename(found, destination)
        else:
            shutil.copy2(found, destination, follow_symlinks=False)
        self._remove_upper(source)
        self.whiteouts.add(source)
        self.events.once("delete", source)

    def _lower_missing(self, path: str) -> bool:
        low = self.lower(path)
        return low is None or not os.path.lexists(low)

    def _materialize(self, path: str, target: str) -> None:
        """A folder as this run sees it, copied whole into ``target`` (a folder renamed)."""
        os.mkdir(target)
        for name in self._names(path):
            child = os.path.join(path, name)
            found = self.locate(child)
            if found is None:
                continue
            destination = os.path.join(target, name)
            if os.path.islink(found):
                os.symlink(os.readlink(found), destination)
            elif os.path.isdir(found):
                self._materialize(child, destination)
            else:
                self._copy_up(found, child, destination)

    def _new_entry(self, path: str, replacing: bool = False) -> str:
        """The upper path for a new entry at ``path``, where the disk would allow one (its folder exists
        and may be written; nothing is there unless ``replacing``)."""
        if not replacing and self.locate(path) is not None:
            raise _error(FileExistsError, errno.EEXIST, path)
        if not self._is_dir(os.path.dirname(path)):
            raise _error(FileNotFoundError, errno.ENOENT, path)
        self._writable_here(path, None)
        if replacing:
            self._remove_upper(path)
        self.events.once("write", path)
        return self._place(path)

    def mkdir(self, path: str, mode: int, run) -> None:
        os.mkdir(self._new_entry(path), mode)

    def link(self, source: str, destination: str, run) -> None:
        found = self._existing(source)
        target = self._new_entry(destination)
        if found.startswith(self.upper + "/"):
            os.link(found, target)
        else:
            self._copy_up(found, destination, target)

    def symlink(self, pointed: str, destination: str, run) -> None:
        os.symlink(pointed, self._new_entry(destination))

    def listdir(self, path: str) -> list[str] | None:
        """The folder as this run sees it, or None where it is the disk's own folder, unchanged."""
        found = self._existing(path)
        if not os.path.isdir(found):
            raise _error(NotADirectoryError, errno.ENOTDIR, path)
        if found == path and not self._touched(path):
            return None
        upper = self.up(path)
        names = set(os.listdir(upper)) if os.path.isdir(upper) else set()
        candidates = set(self.base.children.get(path, ()))
        low = self.lower(path)
        if low is not None and os.path.isdir(low):
            candidates.update(os.listdir(low))
        for name in candidates - names:
            if self.locate(os.path.join(path, name)) is not None:
                names.add(name)
        return sorted(names)

    def _names(self, path: str) -> list[str]:
        names = self.listdir(path)
        return os.listdir(path) if names is None else names

    def note_event(self, kind: str, **fields) -> None:
        self.events.append({"op": kind, **fields})
