"""Findings a team has decided to keep, taken out of the checklist but not out of the report: a ``# noqa: ADV101``
(or ``# noqa: host-sync``) comment on a line a finding points at, or ``per-file-ignores`` in ``[tool.advisor]``.
A suppressed finding stays in the report under ``suppressed``, with the comment's place; it fails no gate. A bare
``# noqa`` is another linter's and suppresses nothing here."""

from __future__ import annotations

import fnmatch
import functools
import os
import re

from advisor.report.schema import Suppressed, UnusedNoqa
from advisor.rulekit.rule import Finding

NOQA = re.compile(r"#\s*noqa:\s*(?P<names>[A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)", re.IGNORECASE)


def suppress(findings: list[Finding], per_file_ignores=(), root: str = "") -> tuple[list[Finding], list[Suppressed]]:
    """(the findings kept, the findings suppressed, each with what suppressed it)."""
    kept, suppressed = [], []
    _lines.cache_clear()  # this run's files as they are now (a notebook audits again after an edit)
    for finding in findings:
        reason = _noqa(finding) or _ignored_path(finding, per_file_ignores, root)
        if reason is None:
            kept.append(finding)
        else:
            suppressed.append(Suppressed(finding=finding, by=reason[0], file=reason[1], line=reason[2]))
    return kept, suppressed


def _noqa(finding: Finding) -> tuple[str, str, int] | None:
    for location in finding.locations:
        if not location.file or not location.line:
            continue
        names = noqa_names(location.file, location.line)
        if finding.code.lower() in names or finding.slug.lower() in names:
            return f"# noqa at {os.path.basename(location.file)}:{location.line}", location.file, location.line
    return None


def _ignored_path(finding: Finding, per_file_ignores, root: str) -> tuple[str, str, int] | None:
    for location in finding.locations:
        if not location.file:
            continue
        relative = os.path.relpath(os.path.abspath(location.file), root or os.getcwd())
        for pattern, slugs in per_file_ignores:
            if finding.slug in slugs and fnmatch.fnmatch(relative, pattern):
                return f"per-file-ignores {pattern!r}", location.file, location.line
    return None


def unused(files: list[str], suppressed: list[Suppressed], rules) -> list[UnusedNoqa]:
    """Each ``# noqa:`` in ``files`` naming one of advisor's rules (by code or slug) that suppressed nothing, as
    ruff's RUF100 says of its own: a suppression left behind hides nothing and may hide the next finding."""
    known = {r.code.lower(): r.slug for r in rules} | {r.slug.lower(): r.slug for r in rules}
    used = {(os.path.abspath(s.file), s.line) for s in suppressed if s.by.startswith("# noqa")}
    found = []
    for path in dict.fromkeys(os.path.abspath(f) for f in files if f and f.endswith(".py") and os.path.isfile(f)):
        for number, text in enumerate(_lines(path), 1):
            match = NOQA.search(text)
            names = [n.strip() for n in match.group("names").split(",")] if match else []
            ours = [n for n in names if n.lower() in known]
            if ours and (path, number) not in used:
                found.append(UnusedNoqa(file=path, line=number, names=ours))
    return found


def noqa_names(path: str, line: int) -> set[str]:
    """The codes and slugs a ``# noqa:`` comment on ``path``'s line names, lower-cased."""
    lines = _lines(path)
    if not 0 < line <= len(lines):
        return set()
    match = NOQA.search(lines[line - 1])
    return {name.strip().lower() for name in match.group("names").split(",")} if match else set()


@functools.lru_cache(maxsize=64)
def _lines(path: str) -> tuple[str, ...]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return tuple(handle.read().splitlines())
    except OSError:
        return ()
