"""``advisor run``'s A/B inside runs of the script, the parent's side: the runs asked for, their pairs of
blocks pooled, the probe's numerics judged (the script's side: ``switched.py``).

A block is 2 to 8 steps, about BLOCK_S of them timed; a run is given the share of the budget left as a
deadline and ends itself once its pairs decide. A script that ends before the pairs wanted is run again and
its pairs add up, up to SWITCHED_RUNS runs; one that gets through fewer than the minimum pairs in all of them
is measured in whole runs instead (the sentence returned says why).
"""

from __future__ import annotations

import math
import time
from typing import Protocol

from advisor.rulekit.rule import Finding, NotVerifiable, Verification
from advisor.run.window_spec import BlocksSpec, WindowSpec
from advisor.verify.judging import LOADER_NOTE, MIN_PAIRS, judged, model_not_called, within
from advisor.verify.measure import ABResult, verdict

BLOCK_S = 0.1  # a block's timed steps last about this long (two steps at the least, eight at the most: a
# short script still gets through a few pairs, and each run that ends early adds its own)
MOST_BLOCK_PAIRS = 200
SWITCHED_RUNS = 8  # runs of the script at the most for one switched measurement (a short script's pairs add up)


class Verifier(Protocol):
    """What the switched measurement needs of ``arms.RunVerifier``: its window, its pairs, its runs."""

    window: WindowSpec
    pairs: int | None
    switched_s: list[float]

    def run(self, fixes: list[Finding], patched: bool = False,
            switched: BlocksSpec | None = None) -> tuple[dict, dict | None] | Verification: ...


def measure_switched(verifier: Verifier, fixes: list[Finding], tolerance: float,
                     share_s: float) -> Verification | str:
    """The fix switched on and off by blocks of steps inside runs of the script (``switched.py``); a
    sentence instead when no run of the script gets through a pair of blocks (whole runs then)."""
    step_s = max((verifier.window.step_ms or 0.0) / 1000, 1e-4)
    block = min(8, max(2, math.ceil(BLOCK_S / step_s)))
    pair_s = 2 * (block + 1) * step_s
    began = time.monotonic()
    baseline_ms: list[float] = []
    candidate_ms: list[float] = []
    runs, probe = 0, None
    while runs < SWITCHED_RUNS:
        left = share_s - (time.monotonic() - began)
        if runs and (len(baseline_ms) >= (verifier.pairs or MOST_BLOCK_PAIRS) or not verifier.pairs and (
                left < pair_s * MIN_PAIRS or _decided(baseline_ms, candidate_ms))):  # --pairs: exactly that many
            break
        wanted = (verifier.pairs - len(baseline_ms)) if verifier.pairs else min(
            MOST_BLOCK_PAIRS, max(MIN_PAIRS, int(left / 2 / pair_s)))  # half the time left: start-up is dear
        spec = BlocksSpec(block=block, most_pairs=wanted, exact=bool(verifier.pairs),
                          deadline=0.0 if verifier.pairs else time.time() + max(left - 1.0, pair_s * MIN_PAIRS))
        run_began = time.monotonic()
        outcome = verifier.run(fixes, switched=spec)
        if isinstance(outcome, Verification):
            return outcome
        window, results = outcome
        runs += 1
        verifier.switched_s.append(time.monotonic() - run_began)
        if runs == 1:
            if window["rewrite_unapplied"]:
                return Verification(status="not-verifiable-here", note=f"{window['rewrite_unapplied']}: the fix "
                                                                        "was not applied, so not measured")
            if window["changes_model"] and not window["model_fixed"]:
                return model_not_called(verifier.window)
            probe = results
        blocks = window.get("blocks") or {}
        baseline_ms += blocks.get("baseline_ms", [])
        candidate_ms += blocks.get("candidate_ms", [])
        if not blocks.get("baseline_ms"):
            break
    least = min(MIN_PAIRS, verifier.pairs or MIN_PAIRS)
    if len(baseline_ms) < least:
        return (f"the script ended before {least} pairs of blocks of {block} steps with the fix switched "
                f"inside one run ({len(baseline_ms)} in {runs} run(s))")
    numerics, errors = probe_numerics(verifier, probe, tolerance, loader_only=window["changes_loader"]
                                      and not window["changes_model"] and not (probe or {}).get("what"))
    if numerics is not None:
        return numerics
    ab = ABResult(baseline_ms, candidate_ms)
    low, high = ab.interval()
    settle, with_data = blocks.get("settle", 1), blocks.get("with_data", False)
    first = "the first" if settle == 1 else f"the first {settle} (the batches made before it among them)"
    notes = [f"{len(baseline_ms)} pairs of blocks of {block} steps, the fix switched on and off inside {runs} run(s) "
             f"of the script (each block's median step{' + data wait' if with_data else ''}; {first} after each "
             "switch not timed)", errors.pop("note")]
    if window["changes_loader"]:
        notes.append(LOADER_NOTE.format(options=", ".join(f"{k}={v}" for k, v in window["loader_options"].items())))
    if window["rewrite_described"]:
        notes.append(f"the candidate rewrote {window['rewrite_described']}")
    compiling = window["first_fixed_extra_s"] if window["compiled"] else None
    return judged(ab, (low, high), notes, timed="block", samples=len(baseline_ms),
                           compile_s=None if compiling is None else round(compiling, 3), **errors)


def _decided(baseline_ms: list[float], candidate_ms: list[float]) -> bool:
    if len(baseline_ms) < MIN_PAIRS:
        return False
    ab = ABResult(baseline_ms, candidate_ms)
    return verdict(ab.speedup, ab.interval()) != "inconclusive"


def probe_numerics(verifier: Verifier, probe: dict | None, tolerance: float,
                   loader_only: bool = False) -> tuple[Verification | None, dict]:
    """The switched run's numerics: the same forward and optimizer step without and with the fix."""
    if loader_only:
        return None, {"note": "the model step is unchanged, only the loader's settings differ"}
    if probe is None or not probe["reference"]:
        why = "; ".join(probe["skipped"]) if probe and probe["skipped"] else "the fix was on for no forward or step"
        return None, {"note": f"numerics not checked: {why}"}
    from advisor.verify.numerics import compare, tolerance_at

    failed, fields = within(compare(probe["reference"], probe["candidate"]), " and ".join(probe["what"]),
                                     *tolerance_at(tolerance, probe.get("precision")))
    if failed is None and probe["skipped"]:
        fields["note"] = "; ".join((fields["note"], *probe["skipped"]))
    return failed, fields



def why_not_switched_here(window: WindowSpec, ruleset, findings: list[Finding], fixes: list[Finding]) -> str:
    """Why these fixes need whole runs of the script rather than switching inside one, by their rules' own say
    (``fix_spec.whole_runs``) or by what the fixes change (``inject.why_not_switched``); "" when they can switch.
    Raises NotVerifiable where a fix cannot be injected at all (each caller says that its own way)."""
    for finding in findings:
        if (spec := ruleset.get(finding.slug).fix_spec) and spec.whole_runs:
            return spec.whole_runs
    from advisor.verify.inject import fixed_target, why_not_switched

    try:
        return why_not_switched(*fixed_target(window.model_copy(update={"fixes": fixes})))
    except NotVerifiable:
        raise
    except Exception as broken:  # noqa: BLE001 - a fix is code too: its run reports it
        return f"applying the fix raised {type(broken).__name__}"


def fix_not_applied(read) -> Verification | None:
    """What a verification window wrote when its fix could not be applied (``read(name)``: one of its files, or
    None): refused (the rule says why it cannot be measured here) or failed (applying it raised)."""
    if (refused := read("fix_refused.json")) is not None:
        return Verification(status="not-verifiable-here", note=refused["reason"])
    if (broken := read("fix_error.json")) is not None:
        return Verification(status="fix-failed", note=broken["message"])
    return None
