"""Places in the user's source: which frames are the user's, and how a place is named. Once, for every
consumer: Python frames seen while the model runs (watched calls, routing, the run's window), tracebacks
and stack dumps (a failed script, a hung rank), TorchDynamo's stack traces (graph nodes, graph breaks),
torch.export's messages, and Python frames recorded in a Kineto trace, possibly on another machine.

The one answer: the user's code is every file that is not PyTorch, Python's standard library, advisor,
or a library installed into site-packages (numpy, transformers, timm: their lines are not the user's to
change; the line that called them is). A package of the user's own installed in editable mode lives
in its own folder, outside site-packages, so its files are the user's.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from typing import Any, Iterator


def _torch_dir() -> str:
    """Where torch is installed, without importing it (offline trace analysis never needs torch)."""
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) + os.sep if locations else "\0"


TORCH_DIR = _torch_dir()
ADVISOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
ROUTING_DIR = os.path.join(ADVISOR_DIR, "files") + os.sep  # the file layer passes the user's own calls on
STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
INSTALLED_MARKERS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}", "/site-packages/",
                     "/dist-packages/")



def _advisor_parts() -> tuple[str, ...]:
    """advisor's own packages, read from its folder, so that a package added or renamed is recognised without
    anyone listing it here."""
    return tuple(sorted(name for name in os.listdir(ADVISOR_DIR)
                        if os.path.isfile(os.path.join(ADVISOR_DIR, name, "__init__.py"))))


# Text that marks a path as PyTorch's, Python's or advisor's own when it was recorded elsewhere
# (another machine's install prefix): the local prefixes above cannot recognise it.
FOREIGN_LIBRARY_MARKERS = ("/torch/", "\\torch\\", "<built-in", "<frozen",
                           *(f"advisor/{part}/" for part in _advisor_parts()))

# One frame of a traceback (``File "x.py", line 7, in f``), a faulthandler dump (``File "x.py", line 7 in f``),
# or a message quoting one (torch.export: ``File x.py, lineno 7``).
FRAME = re.compile(r'File "?(?P<file>[^",\n]+?)"?, line(?:no)? (?P<line>\d+)(?:,? in (?P<function>[^\s,]+))?')


@functools.lru_cache(maxsize=8192)
def is_library_path(path: str) -> bool:
    """Whether a frame's file is not the user's: PyTorch, the standard library, advisor, site-packages (asked per
    frame of every traced object and annotated call: cached by path)."""
    if not path or path.startswith("<"):
        return True
    if not os.path.isabs(path) and not path.startswith(("/", "\\")):
        return _installed_relative(path)
    if path.startswith((TORCH_DIR, ADVISOR_DIR)) or any(marker in path for marker in INSTALLED_MARKERS):
        return True
    if path.startswith(STDLIB_DIR):
        return True
    if any(marker in path for marker in FOREIGN_LIBRARY_MARKERS):
        return True
    head, sep, _ = path.partition("/lib/python3.")
    return bool(sep)  # ``.../lib/python3.11/json/decoder.py``: the standard library of another install


@functools.lru_cache(maxsize=4096)
def _installed_relative(path: str) -> bool:
    """A relative path as the profiler writes Python frames, less the sys.path folder they lie in
    (``numpy/_core/memmap.py``): a library's when its first part is a module installed as one here."""
    if any(marker in path for marker in FOREIGN_LIBRARY_MARKERS) or path.startswith("torch/"):
        return True
    first = path.replace("\\", "/").split("/", 1)[0]
    name = first[:-3] if first.endswith(".py") else first
    if not name.isidentifier():
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = (spec.origin or next(iter(spec.submodule_search_locations or []), "")) if spec is not None else ""
    return bool(origin) and os.path.isabs(origin) and is_library_path(origin)


def frames_in(text: str) -> Iterator[tuple[str, int, str, str]]:
    """(file, line, function, the line after the frame) for each frame quoted in ``text``, outermost first
    in a traceback (faulthandler writes the innermost first)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        for match in FRAME.finditer(line):
            after = lines[index + 1].strip() if index + 1 < len(lines) else ""
            yield match.group("file").strip(), int(match.group("line")), match.group("function") or "", after


def innermost_user_frame(text: str, prefer: str | None = None, library_fallback: bool = False) -> tuple[str, int, str]:
    """(file, line, code) of the innermost of the user's frames a traceback quotes (in ``prefer`` if any
    is), else ("", 0, ""); with ``library_fallback``, where none is the user's, the innermost installed library's
    (not torch's nor the standard library's): what a library's model does is placed there, and said to be its."""
    quoted = list(frames_in(text))
    frames = [(file, line, code) for file, line, _, code in quoted if not is_library_path(file)]
    if prefer is not None:
        preferred = os.path.abspath(prefer)
        frames = [f for f in frames if os.path.abspath(f[0]) == preferred] or frames
    if not frames and library_fallback:
        frames = [(file, line, code) for file, line, _, code in quoted if third_party(file)]
    return frames[-1] if frames else ("", 0, "")


def user_frame_of(frame: Any, library_fallback: bool = False) -> tuple[str, int] | None:
    """The user's frame that made this call: outwards through torch and the standard library.

    None when advisor itself made it (the harness's own ``zero_grad``). With ``library_fallback``, a call
    no line of the user's leads to but an installed library's does (advisor's harness running a
    transformers model: its router's ``nonzero``) is placed at the innermost such library line, so what
    it costs is seen and said to be a library's (the engine keeps it LOW at most), not lost. A call the
    user's line leads to through a library stays the user's line's: ``rearrange(x, ...)`` is theirs.
    """
    in_library = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(ROUTING_DIR):
            frame = frame.f_back
            continue
        if filename.startswith(ADVISOR_DIR):
            return in_library if library_fallback else None
        if not is_library_path(filename):
            return filename, frame.f_lineno
        if in_library is None and third_party(filename):
            in_library = filename, frame.f_lineno
        frame = frame.f_back
    return in_library if library_fallback else None


def third_party(path: str) -> bool:
    """An installed library's file that is neither PyTorch's nor the standard library's."""
    return not path.startswith((TORCH_DIR, STDLIB_DIR)) and any(marker in path for marker in INSTALLED_MARKERS)


def direct_user_caller(frame: Any) -> tuple[str, int] | None:
    """The frame that called into torch, where it is the user's own line (``loss = loss_fn(model(x), y)``);
    None when a library made the call (a Trainer's loop: its line is not the user's to edit)."""
    while frame is not None and frame.f_code.co_filename.startswith((TORCH_DIR, ADVISOR_DIR)):
        frame = frame.f_back
    if frame is None or is_library_path(frame.f_code.co_filename):
        return None
    return frame.f_code.co_filename, frame.f_lineno


def user_frame(depth: int = 2, library_fallback: bool = False) -> tuple[str, int] | None:
    """The innermost frame outside torch and advisor, seen from the caller's caller."""
    return user_frame_of(sys._getframe(depth), library_fallback)


def site_label(file: str, line: int) -> str:
    """``model.py:12``: how a place is named in a message (the full path is in the location)."""
    return f"{os.path.basename(file)}:{line}" if file else "an unattributed op"
