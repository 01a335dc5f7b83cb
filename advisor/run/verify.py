"""Verify ``advisor run``'s findings: run the script's window again with the fix injected.

Baseline and candidate runs alternate (A B A B ...), each a fresh process timing the same window
of steps; each pair gives a ratio of their mean step times (step + data wait for loader
fixes), and the verdict and its interval come from the same bootstrap as ``audit``'s. The
gradients at the first optimizer step are compared for fixes that touch the step's arithmetic.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from advisor.rule import Finding, Verification
from advisor.run.launch import discard, launch
from advisor.verify.measure import ABResult, verdict
from advisor.verify.plan import MeasuredFixes

MIN_PAIRS = 3
MAX_PAIRS = 8
GRADIENT_TOLERANCE = 1e-4

# finding slug -> the injected fix (inject.py), built from the finding's evidence
INJECTABLE: dict[str, Callable[[Finding], dict]] = {
    "zero-grad": lambda f: {"name": "zero_grad_to_none"},
    "checkpoint-in-step": lambda f: {"name": "skip_saves"},
    "anomaly-detection": lambda f: {"name": "anomaly_off"},
    "dataloader-workers": lambda f: {"name": "loader_options", "options": {
        "num_workers": int(f.evidence["workers_suggested"]), "persistent_workers": True}},
    "dataloader-too-many-workers": lambda f: {"name": "loader_options", "options": {
        "num_workers": int(f.evidence["suggested_workers"])}},
}
LOADER_FIXES = {"dataloader-workers", "dataloader-too-many-workers"}  # judged on step + data wait
STEP_NUMERICS = {"zero-grad", "anomaly-detection"}  # the others leave the step's arithmetic alone
NOTES = {
    "checkpoint-in-step": "the saves skipped: the most an asynchronous save can gain",
    "dataloader-workers": "the script's loaders rebuilt with more (persistent) workers",
    "dataloader-too-many-workers": "the script's loaders rebuilt with workers = usable cores",
}


def verify_run(command: list[str], window: dict, findings: list[Finding], budget_s: float, timeout: float,
               progress: Callable[[str], None] = lambda text: None) -> MeasuredFixes:
    measured = MeasuredFixes()
    started = time.monotonic()
    for finding in findings:
        if finding.slug not in INJECTABLE:
            measured.results[finding.id] = Verification(
                status="not-verifiable-here", device="",
                note="advisor run cannot inject this fix into an unmodified script yet; audit the model with a "
                     "model file to measure it")
            continue
        left = budget_s - (time.monotonic() - started)
        progress(f"{finding.slug}: running the script with the fix and without, alternately")
        measured.results[finding.id] = _measure(command, window, finding, left, timeout)
    return measured


def _measure(command: list[str], window: dict, finding: Finding, budget_s: float, timeout: float) -> Verification:
    fix = INJECTABLE[finding.slug](finding)
    loader = finding.slug in LOADER_FIXES
    base_runs: list[dict] = []
    cand_runs: list[dict] = []
    began = time.monotonic()
    while len(base_runs) < MAX_PAIRS:
        for fixes, runs in (([], base_runs), ([fix], cand_runs)):
            outcome = _window(command, {**window, "measure_only": True, "fixes": fixes}, timeout)
            if outcome is None:
                return Verification(status="fix-failed" if fixes else "skipped",
                                    note="the script did not complete its timed window" + (" with the fix" if fixes else ""))
            runs.append(outcome)
        if len(base_runs) >= MIN_PAIRS and time.monotonic() - began >= budget_s / 2:
            break
    errors: dict = {}
    if finding.slug in STEP_NUMERICS:
        a, b = base_runs[0].get("first_gradients"), cand_runs[0].get("first_gradients")
        if a is not None and b is not None:
            error = abs(a - b) / max(abs(a), 1e-30)
            errors = {"max_rel_error": round(error, 8), "tolerance": GRADIENT_TOLERANCE}
            if error > GRADIENT_TOLERANCE:
                return Verification(status="numerics-failed", note=f"the gradients at the first step differ by "
                                    f"{error:.3g} of their magnitude", **errors)
    ab = ABResult([_cost(r, loader) for r in base_runs], [_cost(r, loader) for r in cand_runs])
    low, high = ab.interval()
    what = "step + data wait" if loader else "step"
    note = (f"{len(base_runs)} runs of the script per side, alternating; mean {what} time over each run's "
            f"{window['steps']} timed steps")
    if finding.slug in NOTES:
        note += f"; {NOTES[finding.slug]}"
    return Verification(status=verdict((low, high)), speedup=round(ab.speedup, 4), ci_low=round(low, 4),
                        ci_high=round(high, 4), baseline_ms=round(statistics.median(ab.baseline_ms), 4),
                        candidate_ms=round(statistics.median(ab.candidate_ms), 4), samples=len(base_runs),
                        note=note, **errors)


def _window(command: list[str], window: dict, timeout: float) -> dict | None:
    run = launch(command, window, timeout)
    try:
        result = run.read("window.json")
    finally:
        discard(run)
    return result if result and result["samples_ms"] else None


def _cost(window: dict, with_data: bool) -> float:
    """The mean step of one run: a cost every k-th step (a checkpoint) counts 1/k, as in the total."""
    if with_data:
        return statistics.fmean(s + w for s, w in zip(window["samples_ms"], window["data_wait_ms"]))
    return statistics.fmean(window["samples_ms"])
