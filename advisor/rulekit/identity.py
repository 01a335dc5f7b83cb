"""A finding's identity: what ``advisor diff`` pairs two runs' findings by, and verification results come
back by. It is the rule and the set of places the finding points at, each place named by its file's name
and the code on its line (the how-many-th line of that text in the file, where the file can be read), so:

- the order of the places does not enter it (two sites of nearly equal cost swap between runs);
- an edit above a place that moves its line does not change it (as SARIF's partial fingerprints and ruff's
  noqa matching do, the code at the place is what is matched);
- measured numbers never enter it: the message carries them, and is left out.

A place with no code known (a trace recorded elsewhere) is named by its line, one with no line by its function.
"""

from __future__ import annotations

import linecache
import os

from advisor.evidence import Location
from advisor.rulekit.rule import Finding

try:  # CPython's own SHA-1: hashlib's digest, without loading OpenSSL (3-10 ms of every start)
    from _sha1 import sha1
except ImportError:  # another interpreter
    from hashlib import sha1


def assign_ids(findings: list[Finding]) -> None:
    """Give each finding its id: ``ADV101-1a2b3c4d``; findings of one rule at the same places are numbered
    (``-2``, ``-3``) in the order of their places' lines, not of their measured cost."""
    seen: dict[str, int] = {}
    for finding in sorted(findings, key=lambda f: sorted((loc.file, loc.line) for loc in f.locations)):
        base = f"{finding.code}-{fingerprint(finding)}"
        seen[base] = seen.get(base, 0) + 1
        finding.id = base if seen[base] == 1 else f"{base}-{seen[base]}"


def fingerprint(finding: Finding) -> str:
    places = "|".join(sorted(place_key(location) for location in finding.locations))
    return sha1(f"{finding.slug}|{places}".encode()).hexdigest()[:8]


def place_key(location: Location) -> str:
    name = os.path.basename(location.file)
    code = " ".join(location.code.split())
    if code:
        return f"{name}:{code}#{_occurrence(location.file, location.line, code)}"
    return f"{name}:{location.line}" if location.line else f"{name}:{location.function}"


def _occurrence(path: str, line: int, code: str) -> int:
    """How many lines above ``line`` in ``path`` carry the same code: two identical lines stay two places."""
    lines = linecache.getlines(path) if path else []
    return sum(1 for text in lines[:max(0, line - 1)] if " ".join(text.split()) == code)
