"""How paths are shown to people: resolved (no ``..``), relative to the working folder when inside it."""

from __future__ import annotations

import os


def short_path(path: str) -> str:
    if not path or path.startswith("<"):
        return path
    resolved = os.path.abspath(path)  # a script started as data/../../x/train.py names its frames so
    relative = os.path.relpath(resolved)
    return resolved if relative.startswith("..") else relative
