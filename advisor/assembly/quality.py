"""How far a report's measurements can be trusted, judged once from the conditions they were taken in.

The timing window's conditions decide the report's state: *quiet*, *contended* (with the figures and the
processes named), or *unknown* (nothing was timed here, or /proc could not be read). An audit whose steps
ran contended first waits a while for the contention to pass and times them again
(``workload/timing.timed_when_quiet``); the summary says so. In a contended run,
every verdict that rests on a share of the measured step (a finding's impact, a silent rule's margin) is
marked *unreliable here* instead of being handed over as if the machine had been quiet: a busy core
stretches each operator, so shares shift and rules fire or fall silent with the load, not the model.
A fix measured under contention says so beside its verdict (whose interval already carries the noise).

The stages check each other: a profiled step much faster than the profiler-free one, or verification
baselines (the unchanged model, timed again beside each fix) far from the timing stage's step, say that the
stages did not measure the same thing. Where contention was measured the report names which stage was seen
contended; where the machine measured quiet (or could not be read) the run is *inconsistent*, never blamed on
the machine: the step as read may not be one whole iteration of the script, or its time drifts. Either way
the shares of a step time the other stages contradict are marked unreliable.
"""

from __future__ import annotations

from advisor.evidence import Evidence
from advisor.machine.conditions import judge
from advisor.report.schema import MeasurementQuality, Report
from advisor.stats import fmean, median

STAGES_DISAGREE = 1.5  # one stage's step this many times the other's: not the same conditions
# Steps shorter than this vary with what ran just before them (the candidate interleaved with a baseline
# evicts its caches): their baselines are not held against the timing stage.
MIN_COMPARABLE_MS = 1.0


def measurement_quality(evidence: Evidence) -> MeasurementQuality:
    conditions = evidence.timing.conditions if evidence.timing is not None else None
    disagreement = _stages_disagree(evidence)
    if conditions is None or conditions.others_cores is None:
        if disagreement:
            return _inconsistent(conditions, disagreement, "the machine's load could not be read")
        unread = "; ".join(conditions.unreadable) if conditions is not None else ""
        return MeasurementQuality(state="unknown", timing=conditions,
                                  summary="machine load not measured: " + (f"unreadable here: {unread}" if unread
                                                                           else "no step was timed here"))
    if disagreement and not judge(conditions):
        return _inconsistent(conditions, disagreement, "the machine measured quiet")
    reasons = judge(conditions) + ([disagreement] if disagreement else [])
    if reasons:
        waited = f" ({evidence.timing.remeasured})" if evidence.timing.remeasured else ""
        return MeasurementQuality(state="contended", reasons=reasons, timing=conditions,
                                  summary="CONTENDED while the step was timed: " + "; ".join(reasons) + waited
                                          + ". Shares of the step and the verdicts on them are unreliable here")
    share = conditions.others_share or 0.0
    return MeasurementQuality(state="quiet", timing=conditions,
                              summary=f"quiet: other processes used {conditions.others_cores:.2f} of "
                                      f"{conditions.cores_usable} CPUs ({share:.0%}) while the step was timed"
                                      + (f" ({evidence.timing.remeasured})" if evidence.timing.remeasured else ""))


def _inconsistent(conditions, disagreement: str, machine: str) -> MeasurementQuality:
    return MeasurementQuality(state="inconsistent", reasons=[disagreement], timing=conditions, summary=(
        f"INCONSISTENT: {disagreement}; {machine}, so the step as read may not be one whole iteration of the "
        "script (see what one step held), or its time drifts. Shares of the step are unreliable here"))


UNRELIABLE_STATES = ("contended", "inconsistent")


def _stages_disagree(evidence: Evidence) -> str:
    """On a CPU, the profiler only adds work: a profiled step much faster than the profiler-free one says the
    timing ran under other conditions than the trace (a load that came and went), so shares of it mislead."""
    timing, trace = evidence.timing, evidence.trace
    if timing is None or trace is None or not trace.steps or evidence.on_cuda or timing.median_ms <= 0:
        return ""
    profiled_ms = median(step.dur for step in trace.steps) / 1000
    if profiled_ms * STAGES_DISAGREE >= timing.median_ms:
        return ""
    return (f"the stages disagree: a profiled step took {profiled_ms:.3g} ms and a profiler-free one "
            f"{timing.median_ms:.3g} ms, though profiling only adds work")


def mark_unreliable(report: Report, hardware_rules: set[str]) -> None:
    """In a contended run, the verdicts that rest on shares of the step say so; the hardware layer's rules
    (``hardware_rules``) judge the machine itself, from the very figures that say it was busy."""
    if report.quality.state not in UNRELIABLE_STATES:
        return
    why = "measured while " + "; ".join(report.quality.reasons)
    for finding in report.findings:
        if finding.slug in hardware_rules:
            continue
        if finding.impact is not None or finding.margin is not None:
            finding.unreliable = why
    for run in report.rules:
        if run.status == "silent" and run.margin is not None and run.slug not in hardware_rules:
            run.unreliable = why


def note_contended_verifications(report: Report) -> None:
    """Each fix whose pairs ran under contention, named with what contended."""
    report.quality.verifications = []
    for finding in report.findings:
        v = finding.verification
        reasons = judge(v.conditions) if v is not None else []
        if reasons:
            report.quality.verifications.append(f"{finding.slug}: " + "; ".join(reasons))


def note_disagreeing_baselines(report: Report, hardware_rules: set[str]) -> None:
    """After verification: the baselines (the unchanged step, timed beside each fix) against the timing
    stage's step. Where they differ by STAGES_DISAGREE or more, the report says by how much and which stage
    ran while the machine was busy, and the shares of the timed step are marked unreliable."""
    timing = report.timing
    if timing is None or not timing.samples_ms or timing.median_ms < MIN_COMPARABLE_MS:
        return
    comparable = {"step": timing.median_ms, "run": fmean(timing.samples_ms)}
    apart = []
    for finding in report.findings:
        v = finding.verification
        if v is None or not v.baseline_ms or v.timed not in comparable:
            continue
        ratio = v.baseline_ms / comparable[v.timed]
        if max(ratio, 1 / ratio) >= STAGES_DISAGREE:
            apart.append((finding.slug, v))
    if not apart:
        return
    reason, seen_contended = _baselines_reason(timing, apart)
    report.quality.reasons.append(reason)
    if report.quality.state not in UNRELIABLE_STATES:
        report.quality.state = "contended" if seen_contended else "inconsistent"
        report.quality.summary = (f"{report.quality.state.upper()}: {reason}. Shares of the step and the verdicts on "
                                  "them are unreliable here")
    else:
        report.quality.summary += f"; {reason}"
    mark_unreliable(report, hardware_rules)


def _baselines_reason(timing, apart: list) -> tuple[str, bool]:
    slugs = ", ".join(slug for slug, _ in apart)
    baseline_ms = median(v.baseline_ms for _, v in apart)
    busy_timing = judge(timing.conditions)
    busy_pairs = [slug for slug, v in apart if judge(v.conditions)]
    if busy_timing and not busy_pairs:
        which = "the timing stage ran while " + "; ".join(busy_timing)
    elif busy_pairs and not busy_timing:
        which = "the verification of " + ", ".join(busy_pairs) + " ran under contention"
    elif busy_pairs:
        which = "both ran under contention"
    else:
        which = "neither was seen contended (a load shorter than a stage, or a step whose time drifts)"
    return (f"the stages disagree: the timing stage measured {timing.median_ms:.3g} ms a step, the baselines "
            f"timed beside the fixes of {slugs} {baseline_ms:.3g} ms; {which}", bool(busy_timing or busy_pairs))
