"""Which paths a file layer keys, and how: absolute, with the directories' symbolic links resolved.

The last component is kept as named (removing a link removes the link, not what it points to).
Paths under the passthrough prefixes are not the user's files: advisor's own scratch folders, the
kernel's pseudo file systems, and the compilers' caches, which compiler subprocesses write too.
"""

from __future__ import annotations

import os
import posixpath

from advisor.machine.procfs import open_file_path

SYSTEM_PREFIXES = ("/proc", "/sys", "/dev")
DIR_CACHE_LIMIT = 4096


def compiler_caches(environ: dict[str, str], tempdir: str) -> list[str]:
    """Caches torch.compile and its compilers write from subprocesses (g++, nvcc, Triton): shared by
    every run, as they are between any two runs of the script."""
    home = os.path.expanduser("~")
    user = os.environ.get("USER") or str(os.getuid())
    return [
        environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempdir, f"torchinductor_{user}"),
        environ.get("TRITON_CACHE_DIR") or os.path.join(home, ".triton"),
        environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(home, ".cache", "torch_extensions"),
        os.path.join(home, ".nv"),
    ]


class Scope:
    def __init__(self, passthrough: list[str] | tuple[str, ...]):
        prefixes = {os.path.realpath(p) for p in passthrough if p} | set(SYSTEM_PREFIXES)
        self.prefixes = tuple(sorted(p.rstrip("/") or "/" for p in prefixes))
        self._dirs: dict[str, str] = {}

    def canonical(self, path: str, dir_fd: int | None = None) -> str:
        if dir_fd is not None and not path.startswith("/"):
            path = posixpath.join(open_file_path(dir_fd), path)
        path = os.path.abspath(path)
        head, tail = posixpath.split(path)
        real = self._dirs.get(head)
        if real is None:
            if len(self._dirs) >= DIR_CACHE_LIMIT:
                self._dirs.clear()
            real = self._dirs[head] = os.path.realpath(head)
        return posixpath.join(real, tail) if tail else real

    def forget(self) -> None:
        """The script changed the directory tree (a rename, a new link): resolve afresh."""
        self._dirs.clear()

    def contains(self, canonical: str) -> bool:
        for prefix in self.prefixes:
            if canonical == prefix or canonical.startswith(prefix + "/"):
                return False
        return True


def ancestors(path: str):
    """``/a/b/c`` -> ``/a/b``, ``/a``, ``/``."""
    while path != "/":
        path = posixpath.dirname(path)
        yield path


def self_and_ancestors(path: str):
    yield path
    yield from ancestors(path)
