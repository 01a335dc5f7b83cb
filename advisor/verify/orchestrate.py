"""How the fixes are measured, for every entry point: each fix alone within its share of the budget, then every
verified fix together (``measure_fixes``), wherever the entry point runs the model. The report's side (planning,
bringing the results back to their findings, demoting what measured no gain) is ``assembly/verification.py``'s.
"""

from __future__ import annotations

import time
from typing import Callable

from advisor.machine.conditions import judge
from advisor.rulekit.rule import Finding, Verification
from advisor.verify.plan import MeasuredFixes


def contended_loss(verification: Verification) -> list[str]:
    """Why the no gain or loss a fix measured may be the machine's (``conditions.judge``); empty: it is the
    fix's own (or it measured no loss)."""
    return judge(verification.conditions) if verification.status in ("no-gain", "slower") else []


def measure_fixes(findings: list[Finding], measure_set: Callable[[list[Finding], float], Verification],
                  budget_s: float | None, minimum_s: Callable[[list[Finding]], float] = lambda chosen: 0.0, device: str = "",
                  progress: Callable[[str], None] = lambda text: None,
                  joins: Callable[[Verification], bool] = lambda outcome: outcome.memory is None) -> MeasuredFixes:
    """Each finding's fix alone (findings as planned: most impact first), then every verified fix for time together,
    wherever the entry point runs them (``measure_set(findings, seconds)``: a child per set, runs of a
    script, or copies in this process). Each gets an equal share of the budget left, with one share kept
    for all together; a fix is skipped when less than ``minimum_s([finding])`` is left (what its measurement needs
    at the least). ``budget_s=None``: no time limit (the entry point measures a fixed number of pairs). ``joins``:
    whether a verified fix can be measured with the others (a memory fix costs time; a fix measured as its source
    patch cannot be applied to the copy the runtime fixes change)."""
    began = time.monotonic()

    def left() -> float:
        return float("inf") if budget_s is None else budget_s - (time.monotonic() - began)
    measured = MeasuredFixes()
    by_id = {finding.id: finding for finding in findings}
    verified: list[Finding] = []
    together = 1 if len(findings) > 1 else 0
    skipped: list[str] = []
    for index, finding in enumerate(findings):
        if left() < minimum_s([finding]):
            skipped.append(finding.id)
            continue
        progress(f"{finding.slug}: measuring its fix against the baseline, alternately")
        outcome = measure_set([finding], max(left() / (len(findings) - index + together), minimum_s([finding])))
        measured.results[finding.id] = outcome
        if outcome.status == "verified" and joins(outcome):
            verified.append(finding)
        elif outcome.status == "verified":
            measured.apart.append(finding.slug)
    if skipped:  # what would have measured them: the time spent, plus one minimal measurement each
        wanted = (time.monotonic() - began) + sum(minimum_s([by_id[finding_id]]) for finding_id in skipped)
        for finding_id in skipped:
            measured.results[finding_id] = Verification(
                status="skipped", device=device,
                note=f"verification budget spent (--budget {budget_s:g} s); about --budget {wanted:.0f} would "
                     f"measure the {len(skipped)} fix(es) skipped")
    if len(verified) > 1 and left() >= minimum_s(verified):
        progress("all verified fixes together, against the baseline, alternately")
        measured.combined = measure_set(verified, left())
    elif len(verified) == 1:
        measured.combined = measured.results[verified[0].id]
    return measured
