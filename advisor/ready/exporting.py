"""export evidence: torch.export non-strict, then strict; on failure every blocker with its line
(draft_export lists all of them where a plain export stops at the first)."""

from __future__ import annotations

from typing import Any

import torch

from advisor.ready.measured import Blocker, ExportEvidence
from advisor.ready.places import first_line, named_in, raised_at


def measure_export(model: torch.nn.Module, inputs: Any, model_file: str) -> ExportEvidence:
    args, kwargs = _arguments(inputs)
    evidence = ExportEvidence()
    failures: list[BaseException] = []
    for strict in (False, True):
        try:
            torch.export.export(model, args, kwargs, strict=strict)
        except Exception as failure:  # noqa: BLE001 - export raises many types
            failures.append(failure)
            continue
        setattr(evidence, "strict" if strict else "non_strict", True)
    if not failures:
        return evidence
    evidence.error = f"{type(failures[0]).__name__}: {first_line(failures[0])}"
    texts = [str(failure) for failure in failures] + [_draft_report(model, args, kwargs)]
    seen: set[tuple[str, int]] = set()
    for failure, text in zip(failures + [None], texts):
        places = named_in(text, model_file) or ([raised_at(failure, model_file)] if failure is not None else [])
        for place in places:
            if place is None or (place.file, place.line) in seen:
                continue
            seen.add((place.file, place.line))
            message = first_line(text) if failure is not None else "draft_export: " + _draft_kind(text, place.line)
            evidence.blockers.append(Blocker(message=message, location=place))
    if not evidence.blockers:
        evidence.blockers.append(Blocker(message=evidence.error))
    return evidence


def _arguments(inputs: Any) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _draft_report(model: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    draft = getattr(torch.export, "draft_export", None)
    if draft is None:
        return ""
    try:
        return str(draft(model, args, kwargs)._report)
    except Exception as failure:  # noqa: BLE001 - draft export may fail outright too
        return str(failure)


def _draft_kind(report: str, line: int) -> str:
    """The heading of the draft report's item ("Data dependent error.") that names this line."""
    heading = ""
    for text in report.splitlines():
        stripped = text.strip()
        if stripped[:3].rstrip(".").isdigit() and stripped.endswith("."):
            heading = stripped.split(".", 1)[1].strip()
        if f"lineno {line}," in text:
            return heading or "a failure"
    return heading or "a failure"
