"""The step time creeps up through the run.

What it detects:
    In an ``advisor run``, step times (of the steps that ran as the script runs alone, twenty at the least) that
    rise with the step number: a rank correlation of at least ``min_correlation``, the last quarter's median step
    at least ``min_rise`` above the first quarter's and still rising over the third's (a quarter of
    ``min_rise``: a state that fills up to a bound, such as L-BFGS's history, levels off). The rise is the
    script's only where its own causes rose with it (the collector's passes, the wait for data, the saves), where
    its steps recorded more operators for backward as the run went on (torch's count of autograd nodes, each
    step's: an adaptive solver's evaluations), or where each profiled step asked more of torch than the one before
    (more operators, or more elements in their inputs, read from the trace). Steps of the same work that merely
    took longer are the machine's pace (a short run's steps wander with it), not a drift. The line named is the
    one whose operators' inputs grew most. A rise in pure Python work that calls no more operators is not seen.

Why it matters:
    A step that gets slower as the run goes on makes a long run far longer than its first steps promise, and its
    cause usually grows without bound: a list of tensors or records kept across steps (a leak the collector walks
    again and again), a history kept with its autograd graph (``loss`` summed without ``.item()``), a cache that
    fills.

How to fix:
    Keep what the loop accumulates as plain numbers (``loss.item()``, not ``loss``), or in a preallocated tensor;
    drop references to old steps' tensors; see gc-pauses where the collector's passes grow. Where only the count
    of operators grew, nothing kept beside it (LOW), the growth is often the workload's own (an adaptive solver's
    evaluations, episodes that lengthen as a policy learns): bound it, or plan the run's time for it.

Example:
    Before::

        losses.append(loss)  # keeps every step's graph alive

    After::

        losses.append(loss.item())
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.machine.step_log import DRIFT_STEPS, StepLog
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.stats import rank_correlation

OTHER_PROCESS = "another process's hold on the CPU"
PARTS = (("collector_ms", "the garbage collector's passes"), ("data_wait_ms", "the wait for data"),
         ("save_ms", "torch.save"), ("cpu_wait_ms", OTHER_PROCESS))


@rule(
    slug="step-drift",
    code="ADV145",
    layer=Layer.APPLICATION,
    needs=("step_log",),
    severity=Severity.MEDIUM,
    thresholds={
        "min_correlation": Threshold(0.6, "rank correlation of step time with step number"),
        "min_rise": Threshold(0.2, "rise of the last quarter's median step over the first quarter's"),
        "min_steps": Threshold(DRIFT_STEPS, "judged steps a rise is judged over (fewer: a state filling up to its "
                                            "bound)", "count"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    log = ev.step_log
    drift = log.drift(int(th.min_steps))
    if drift is None:
        yield Clean(why=f"{len(log.judged())} step(s) ran as the script runs alone, fewer than the {th.min_steps:g} a "
                        "rise is judged over")
        return
    correlation, ratio, still = drift
    rising = correlation >= th.min_correlation and still - 1.0 >= th.min_rise / 4  # not a state that filled up
    judged = log.judged()
    quarter = len(judged) // 4
    grew = _grown_parts(judged, quarter) if rising else []
    work_grew, nodes = log.work_growth(), log.nodes_growth()
    if nodes is not None:
        grew.append(f"the operators it records for backward ({nodes[0]:.0f} -> {nodes[1]:.0f} a step)")
    # the rise is the script's where its own causes grew with it, its steps recorded more operators as the run went
    # on, or each profiled step asked more of torch than the one before; steps of the same work that merely took
    # longer (a machine's pace wandering over a short window, another process's hold) are not a drift of the script's
    own = rising and (bool(work_grew) or any(not part.startswith(OTHER_PROCESS) for part in grew))
    yield ev.share_margin("rise of the step time through the run with the script's own work, still rising at its "
                          "end", ratio - 1.0 if own else 0.0, th.min_rise)
    if rising and not own and ratio - 1.0 >= th.min_rise:
        pace = "another process's hold on the CPU" if grew else "the machine's pace"  # only that part can be left
        yield Clean(why=f"the step time rose {ratio:.2f}x through the run, but {_same_work(log, work_grew)} and "
                        f"none of the collector's passes, the wait for data or the saves rose with it: {pace}, not "
                        "the script's")
    if not own or ratio - 1.0 < th.min_rise:
        return
    why = ", ".join(grew) or "the step's own work (what the loop keeps across steps grows)"
    grown = log.growing_line()
    if grown is not None:
        line, first = grown
        why += (f"; of its operators, those at {site_label(line.file, line.line)} grew most (their inputs from "
                f"{first:,} to {line.elements:,} elements over the profiled steps)")
    # more operators each step and nothing kept growing beside them: often the workload's own nature (an adaptive
    # solver's evaluations, episodes that lengthen as a policy learns), not a leak
    more_calls = nodes is not None and not work_grew and len(grew) == 1
    yield Finding(
        severity=Severity.LOW if more_calls else Severity.MEDIUM,
        message=(f"the step time rises through the run: the last {quarter} judged steps' median is {ratio:.2f}x the "
                 f"first {quarter}'s (rank correlation {correlation:.2f} over {len(judged)} steps); it grew with {why}"),
        impact=min(1.0, ratio - 1.0),
        evidence={"rank_correlation": round(correlation, 3), "last_over_first_quarter": round(ratio, 3),
                  "last_over_third_quarter": round(still, 3), "judged_steps": len(judged), "grew_with": grew,
                  "work_grew": work_grew},
        locations=[Location.at(grown[0].file, grown[0].line,
                               note=f"inputs {grown[1]:,} -> {grown[0].elements:,} elements")] if grown else [],
        fix=MORE_CALLS_FIX if more_calls else KEPT_FIX,
    )


KEPT_FIX = Fix(summary="keep what the loop accumulates as plain numbers or in preallocated tensors; drop old steps' "
                       "tensors (loss.item(), not loss)",
               before="losses.append(loss)", after="losses.append(loss.item())",
               docs=["https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory"])
MORE_CALLS_FIX = Fix(summary="each step calls more operators as the run goes on: where that is the workload's nature "
                             "(an adaptive solver's evaluations: bound them with its tolerances or step limit; episodes "
                             "that lengthen as the policy learns) plan the run's time for it; else find the loop that "
                             "runs over something that grows",
                     docs=["https://pytorch.org/docs/stable/notes/autograd.html"])


def _grown_parts(judged: list, quarter: int) -> list[str]:
    """The timed parts of the step that rose with it (at least 0.3 of its rise, in step with it), with their rise."""
    rise = sum(s.ms for s in judged[-quarter:]) / quarter - sum(s.ms for s in judged[:quarter]) / quarter
    grew = []
    for quantity, name in PARTS:
        values = [getattr(step, quantity) or 0.0 for step in judged]
        part_rise = sum(values[-quarter:]) / quarter - sum(values[:quarter]) / quarter
        if rise > 0 and part_rise >= 0.3 * rise and rank_correlation(values) >= 0.5:
            grew.append(f"{name} (+{part_rise:.3g} ms of the +{rise:.3g} ms)")
    return grew


def _same_work(log: StepLog, work_grew: bool | None) -> str:
    if work_grew is None:
        return "no two profiled steps show whether the step's own work grew, its steps recorded no more operators "\
               "for backward as the run went on"
    first = log.profiled_work[0]
    return (f"the work of its {len(log.profiled_work)} profiled steps did not grow from one to the next "
            f"({first.operators} operators on {first.elements:,} input elements in the first), its steps recorded no "
            "more operators for backward as the run went on")
