"""How a verification run's measurement of a fix is judged and said, whichever way the script ran (in whole
runs, ``arms.py``, or with the fix switched inside a run, ``switched_arms.py``): the verdict with its power, the
numerics against the tolerance."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from advisor.rulekit.rule import Verification
from advisor.verify.measure import ABResult, resolution_note, smallest_resolvable, verdict, why_inconclusive

if TYPE_CHECKING:
    from advisor.run.window_spec import WindowSpec
    from advisor.verify.numerics import Comparison

MIN_PAIRS = 3
LOADER_NOTE = "the script's loaders rebuilt with {options}"


def judged(ab: ABResult, interval: tuple[float, float], notes: list[str], **fields) -> Verification:
    """The verdict of these pairs, with their power, as every measurement of a fix says it."""
    status = verdict(ab.speedup, interval)
    if status == "inconclusive":
        notes.append(why_inconclusive(ab.speedup, interval))
    notes.append(resolution_note(interval))
    low, high = interval
    return Verification(status=status, speedup=round(ab.speedup, 4), ci_low=round(low, 4),
                        ci_high=round(high, 4), baseline_ms=round(statistics.median(ab.baseline_ms), 4),
                        candidate_ms=round(statistics.median(ab.candidate_ms), 4),
                        resolves=smallest_resolvable(interval), note="; ".join(n for n in notes if n), **fields)


def model_not_called(window: WindowSpec) -> Verification:
    model = window.model.class_name if window.model is not None else "not identified by the audit run"
    return Verification(status="fix-failed", note=f"the model ({model}) was never called in the run with "
                                                  "the fix, so the fix was not applied")


def within(comparison: Comparison, what: str, tolerance: float, raised: str = "") -> tuple[Verification | None, dict]:
    """(a numerics-failed Verification or None, the error fields and a note for the verified one); ``raised``:
    why the tolerance is not the fix's own (the step's reduced precision)."""
    errors = {"max_abs_error": comparison.max_abs_error, "max_rel_error": comparison.max_rel_error,
              "tolerance": tolerance}
    if not comparison.baseline_finite:
        return None, {**errors, "note": "numerics not checked: the baseline's values contain NaN or Inf"}
    if not comparison.within(tolerance):
        detail = comparison.detail or (f"{what} differ by {comparison.max_rel_error:.3g} of their magnitude "
                                       f"(max abs {comparison.max_abs_error:.3g}), more than the {tolerance:g} allowed")
        return Verification(status="numerics-failed", note="; ".join(p for p in (detail, raised) if p), **errors), errors
    note = f"{what} match within {comparison.max_rel_error:.2g} of their magnitude"
    return None, {**errors, "note": "; ".join(p for p in (note, raised) if p)}
