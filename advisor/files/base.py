"""The files as the audited run found them, read from its journal: an experiment run's lowest layer."""

from __future__ import annotations

import json
import os

from advisor.files.scope import ancestors, self_and_ancestors


class Claim:
    __slots__ = ("path", "ns", "state", "stored", "reason")

    def __init__(self, entry: dict):
        self.path, self.ns, self.state = entry["path"], entry.get("ns", 0), entry.get("state", "unsaved")
        self.stored, self.reason = entry.get("stored"), entry.get("reason", "")


class Base:
    """The files as the audited run found them: its journal's claims over the disk."""

    def __init__(self, claims: list[Claim]):
        self.claims = {claim.path: claim for claim in claims}
        self.children: dict[str, set[str]] = {}
        self.touched: set[str] = set()
        for path in self.claims:
            self.children.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
            self.touched.update(ancestors(path))

    @classmethod
    def load(cls, journal: str | None) -> Base:
        claims = []
        folder = os.path.join(journal, "claims") if journal else None
        for name in sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else ():
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    claims.append(Claim(json.load(handle)))
            except (OSError, ValueError, KeyError):
                continue
        return cls(claims)

    def lower(self, path: str) -> str | None:
        """Where the path's content was when the audited run began (None: it did not exist). The
        earliest claim of the path or of a folder holding it decides."""
        decisive = None
        for candidate in self_and_ancestors(path):
            claim = self.claims.get(candidate)
            if claim is not None and (decisive is None or claim.ns < decisive.ns):
                decisive = claim
        if decisive is None or decisive.state == "unsaved":
            return path
        if decisive.state == "absent":
            return None
        return decisive.stored + path[len(decisive.path):]
