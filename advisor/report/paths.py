"""How paths are shown to people: relative to the working folder when inside it."""

from __future__ import annotations

import os


def short_path(path: str) -> str:
    if not path or path.startswith("<"):
        return path
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative
