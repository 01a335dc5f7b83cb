"""Places in the user's source: which frames are the user's, and how a place is named.

One answer to "is this library code?" for every consumer: Python frames seen while the model
runs (watched calls, routing), TorchDynamo's stack traces (graph nodes, graph breaks) and
Python frames recorded in a Kineto trace, possibly on another machine. Third-party model
libraries (transformers, timm) count as the user's code: that is where the model lives.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


def _torch_dir() -> str:
    """Where torch is installed, without importing it (offline trace analysis never needs torch)."""
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) + os.sep if locations else "\0"


TORCH_DIR = _torch_dir()
ADVISOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
ROUTING_DIR = os.path.join(ADVISOR_DIR, "files") + os.sep  # the file layer passes the user's own calls on
STDLIB_DIR = os.path.dirname(os.__file__) + os.sep

# Text that marks a path as PyTorch's, Python's or advisor's own when it was recorded elsewhere
# (another machine's install prefix): the local prefixes above cannot recognise it.
FOREIGN_LIBRARY_MARKERS = ("/torch/", "\\torch\\", "<built-in", "<frozen", "advisor/capture/", "advisor/sandbox/",
                           "advisor/workload/step.py", "advisor/workload/target.py")


def is_library_path(path: str) -> bool:
    """Whether a frame's file is PyTorch, the standard library or advisor itself (not the user's)."""
    if not path or path.startswith("<"):
        return True
    if path.startswith(TORCH_DIR) or path.startswith(ADVISOR_DIR):
        return True
    if path.startswith(STDLIB_DIR) and "site-packages" not in path:
        return True
    if any(marker in path for marker in FOREIGN_LIBRARY_MARKERS):
        return True
    return _foreign_stdlib(path)


def _foreign_stdlib(path: str) -> bool:
    """``.../lib/python3.11/json/decoder.py``: the standard library of another install."""
    head, sep, rest = path.partition("/lib/python3.")
    return bool(sep) and "site-packages" not in rest and "dist-packages" not in rest


def user_frame_of(frame: Any) -> tuple[str, int] | None:
    """The user's frame that made this call: outwards through torch and the standard library.

    None when advisor itself made it (the harness's own ``zero_grad``).
    """
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(ROUTING_DIR):
            frame = frame.f_back
            continue
        if filename.startswith(ADVISOR_DIR):
            return None
        if not is_library_path(filename):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def user_frame(depth: int = 2) -> tuple[str, int] | None:
    """The innermost frame outside torch and advisor, seen from the caller's caller."""
    return user_frame_of(sys._getframe(depth))


def site_label(file: str, line: int) -> str:
    """``model.py:12``: how a place is named in a message (the full path is in the location)."""
    return f"{os.path.basename(file)}:{line}" if file else "an unattributed op"
