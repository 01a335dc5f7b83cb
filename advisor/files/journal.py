"""The audited run's journal: before a path first changes, what it held.

The audited run's writes are real. The first time any process of the run is about to change a
path (write, append, truncate, delete, rename it or over it, remove a tree), the journal *claims*
it: one marker file per path, created exclusively, so the processes of a run (ranks, loader
workers) agree on who saw the path first. The claim keeps the path's state before the change:

- ``absent``: it did not exist (the run created it);
- ``saved``: a copy in the store (a clone where the file system makes them, else a copy), or a
  hard link when the operation only moves or removes the directory entry (``os.replace`` over it,
  ``unlink``, ``rename``, a removed tree), so a large checkpoint costs nothing to keep. Should the
  run later change a linked file in place, the link is turned into a copy first;
- ``unsaved``: it could not be kept (larger than the limit, not a regular file), with the reason:
  the experiment runs then cannot start from the same files, and are not run.

The experiment runs read these claims as their base layer (``base.Base``). Every write the run
made is also logged (``written.jsonl``) for the report, and the time the journal spent keeping
copies is counted (``spent``), so the step window can leave it out of the step it timed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import threading
import time

from advisor.files.log import AppendLog
from advisor.files.scope import Scope, ancestors

COPY = "copy"  # the content may change in place: keep a copy
LINK = "link"  # the entry is moved or removed: a hard link keeps the old content
WRITTEN_LOG = "written.jsonl"
FICLONE = 0x40049409  # Linux ioctl: a copy-on-write clone (btrfs, XFS), instant whatever the size


def claim_key(path: str) -> str:
    return hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()


class Journal:
    mode = "journal"
    routes_reads = False  # the audited run reads the disk as it is

    def __init__(self, folder: str, limit_bytes: int, passthrough: list[str]):
        self.claims = os.path.join(folder, "claims")
        self.store = os.path.join(folder, "store")
        self.log = AppendLog(os.path.join(folder, WRITTEN_LOG))
        os.makedirs(self.claims, exist_ok=True)
        os.makedirs(self.store, exist_ok=True)
        self.scope = Scope([folder, *passthrough])
        self.limit = limit_bytes
        self.stored_bytes = 0
        self.spent = 0.0  # seconds spent keeping copies, inside the user's calls
        self.claimed: set[str] = set()
        self.linked: dict[tuple[int, int], str] = {}  # (device, inode) of a file the store links -> its stored path
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    # --- what interposition asks ------------------------------------------------------------
    def for_read(self, path: str) -> str | None:
        return None

    def for_write(self, path: str, keep: bool, exclusive: bool) -> str | None:
        self.claim(path, COPY)
        self._unshare(path)
        self.note(path, "write")
        return None

    def opened(self, path: str, target: str | None, handle) -> None:
        pass

    def remove(self, path: str, run) -> None:
        if not os.path.isdir(path) or os.path.islink(path):  # unlinking a folder fails: nothing to keep
            self.claim(path, LINK)
        run()
        self.note(path, "delete")

    def rmdir(self, path: str, run) -> None:
        if os.path.isdir(path) and not os.listdir(path):  # removing a folder that holds files fails
            self.claim(path, LINK, tree=True)
        run()
        self.note(path, "delete")

    def rmtree(self, path: str, run) -> None:
        self.claim(path, LINK, tree=True)
        run()
        self.note(path, "delete")

    def rename(self, source: str, destination: str, run) -> None:
        self.claim(source, LINK, tree=True)
        self.claim(destination, LINK, tree=True)
        run()
        self.note(source, "delete")
        self.note(destination, "write")

    def adopt(self, source: str, destination: str, run) -> None:
        self.claim(destination, LINK, tree=True)
        run()
        self.note(destination, "write")

    def release(self, source: str, destination: str, run) -> None:
        self.claim(source, LINK, tree=True)
        run()
        self.note(source, "delete")

    def mkdir(self, path: str, mode: int, run) -> None:
        self.claim(path, COPY)  # an existing folder is not claimed: makedirs(exist_ok=True) copies nothing
        run()
        self.note(path, "write")

    def link(self, source: str, destination: str, run) -> None:
        self.claim(destination, LINK)
        run()
        self.note(destination, "write")

    def symlink(self, target: str, destination: str, run) -> None:
        self.link(target, destination, run)

    def listdir(self, path: str) -> list[str] | None:
        return None

    def note_event(self, kind: str, **fields) -> None:
        self.log.append({"op": kind, **fields})

    def note(self, path: str, op: str) -> None:
        self.log.once(op, path)

    # --- claims ----------------------------------------------------------------------------
    def claim(self, path: str, how: str, tree: bool = False) -> None:
        """Keep ``path`` as it is now, unless this run already claimed it or a folder holding it. A
        folder is kept only where it goes as a whole (``tree``): opening or making one changes nothing in it."""
        if path in self.claimed or any(parent in self.claimed for parent in ancestors(path)):
            return
        if not tree and os.path.isdir(path) and not os.path.islink(path):
            return
        began = time.perf_counter()
        with self._lock:
            if path not in self.claimed:
                self._claim(path, how)
                self.claimed.add(path)  # only now: another thread's write waits for the copy above
        self.spent += time.perf_counter() - began

    def _claim(self, path: str, how: str) -> None:
        marker = os.path.join(self.claims, claim_key(path))
        try:
            descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return  # another process of the run saw it first
        except OSError as failed:  # the user's write goes on; the experiment runs will not
            self.note_event("unjournaled", path=path, reason=failed.strerror or str(failed))
            return
        entry = {"path": path, "ns": time.time_ns()}
        try:
            entry.update(self._keep(path, how))
        except OSError as failed:
            entry.update(state="unsaved", reason=f"{failed.strerror or failed} while keeping a copy")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(entry, handle)
        except OSError:
            pass  # an unreadable claim: the experiment runs read it as a path advisor could not keep

    def _keep(self, path: str, how: str) -> dict:
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return {"state": "absent"}
        stored = os.path.join(self.store, claim_key(path))
        if stat.S_ISLNK(found.st_mode):
            os.symlink(os.readlink(path), stored)
            return {"state": "saved", "stored": stored, "kind": "link", "size": 0}
        if stat.S_ISREG(found.st_mode):
            if refused := self._over_limit(found.st_size):
                return refused
            self._keep_file(path, stored, how)
            return {"state": "saved", "stored": stored, "kind": "file", "size": found.st_size}
        if stat.S_ISDIR(found.st_mode):
            _, size = tree_size(path, self.limit - self.stored_bytes + 1)
            if refused := self._over_limit(size):
                return refused
            shutil.copytree(path, stored, symlinks=True, copy_function=lambda a, b: self._keep_file(a, b, how))
            return {"state": "saved", "stored": stored, "kind": "dir", "size": size}
        return {"state": "unsaved", "reason": "not a regular file, folder or link"}

    def _over_limit(self, size: int) -> dict | None:
        if self.stored_bytes + size <= self.limit:
            return None
        return {"state": "unsaved", "size": size,
                "reason": f"{size / 1e6:.1f} MB, past the {self.limit / 1e6:.1f} MB it may keep: --shadow-limit"}

    def _keep_file(self, source: str, destination: str, how: str) -> None:
        if how == LINK:
            try:
                os.link(source, destination)
                found = os.stat(destination)
                self.linked[(found.st_dev, found.st_ino)] = destination
                return
            except OSError as refused:
                if refused.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                    raise
        _copy(source, destination)
        self.stored_bytes += os.stat(destination).st_size

    def _unshare(self, path: str) -> None:
        """A file about to change in place that the store holds by a hard link (it was renamed earlier):
        the store's link becomes a copy first."""
        if not self.linked:
            return
        try:
            found = os.stat(path)
        except OSError:
            return
        stored = self.linked.pop((found.st_dev, found.st_ino), None)
        if stored is not None:
            began = time.perf_counter()
            with self._lock:
                _copy(stored, stored + ".copy")
                os.replace(stored + ".copy", stored)
            self.spent += time.perf_counter() - began


def _copy(source: str, destination: str) -> None:
    """A clone where the file system makes them (no bytes copied), else a copy; metadata kept."""
    try:
        import fcntl

        with open(source, "rb") as original, open(destination, "wb") as clone:
            fcntl.ioctl(clone.fileno(), FICLONE, original.fileno())
        shutil.copystat(source, destination)
    except (OSError, ImportError):
        shutil.copy2(source, destination)


def tree_size(path: str, enough: float = float("inf")) -> tuple[int, int]:
    """(files, bytes) of the regular files under ``path``, counted until ``enough`` bytes are passed."""
    files = total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                found = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(found.st_mode):
                files += 1
                total += found.st_size
                if total > enough:
                    return files, total
    return files, total
