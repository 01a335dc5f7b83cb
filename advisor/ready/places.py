"""The user's lines behind a failure: from an exception's traceback, or named in the text of a
torch.export / Dynamo message (which quote the user's frames as ``File "x.py", line 7``)."""

from __future__ import annotations

import os
import re

from advisor.errors import user_location
from advisor.evidence import Location
from advisor.sources import FRAME, is_library_path

_GUARD_SITE = re.compile(r"# (?P<file>[^ #]+\.py):(?P<line>\d+) in ")


def raised_at(exc: BaseException, model_file: str) -> Location | None:
    file, line, _ = user_location(exc.__traceback__, model_file)
    return Location.at(file, line) if file else None


def named_in(text: str, model_file: str) -> list[Location]:
    """The user's frames a message names, innermost last, without repeats; the model file's first."""
    found: list[tuple[str, int]] = []
    mine = os.path.abspath(model_file)
    for pattern in (FRAME, _GUARD_SITE):
        for match in pattern.finditer(text):
            file = match.group("file").strip()
            if not os.path.isfile(file) and mine.endswith(file.lstrip(".")):
                file = mine  # guard comments shorten long paths from the left ("ork/main/model.py")
            place = (file, int(match.group("line")))
            if place not in found and os.path.isfile(file) and not is_library_path(file):
                found.append(place)
    found.sort(key=lambda place: os.path.abspath(place[0]) != mine)
    return [Location.at(file, line) for file, line in found]


def first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
