"""The step time creeps up through the run.

What it detects:
    In an ``advisor run``, step times (of the steps that ran as the script runs alone, twenty at the least) that
    rise with the step number: a rank correlation of at least ``min_correlation``, the last quarter's median step
    at least ``min_rise`` above the first quarter's and still rising over the third's (a quarter of
    ``min_rise``: a state that fills up to a bound, such as L-BFGS's history, levels off). The cause is the part
    of the step that rose with it: the collector's passes, the wait for data, the saves, another process's hold on
    the CPU; else the step's own work; and the line whose operators grew most over the profiled steps.

Why it matters:
    A step that gets slower as the run goes on makes a long run far longer than its first steps promise, and its
    cause usually grows without bound: a list of tensors or records kept across steps (a leak the collector walks
    again and again), a history kept with its autograd graph (``loss`` summed without ``.item()``), a cache that
    fills.

How to fix:
    Keep what the loop accumulates as plain numbers (``loss.item()``, not ``loss``), or in a preallocated tensor;
    drop references to old steps' tensors; see gc-pauses where the collector's passes grow.

Example:
    Before::

        losses.append(loss)  # keeps every step's graph alive

    After::

        losses.append(loss.item())
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.machine.step_log import DRIFT_STEPS
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.stats import rank_correlation

PARTS = (("collector_ms", "the garbage collector's passes"), ("data_wait_ms", "the wait for data"),
         ("save_ms", "torch.save"), ("cpu_wait_ms", "another process's hold on the CPU"))


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
    yield ev.share_margin("rise of the step time through the run, still rising at its end",
                          ratio - 1.0 if rising else 0.0, th.min_rise)
    if not rising or ratio - 1.0 < th.min_rise:
        return
    judged = log.judged()
    quarter = len(judged) // 4
    rise = sum(s.ms for s in judged[-quarter:]) / quarter - sum(s.ms for s in judged[:quarter]) / quarter
    grew = []
    for quantity, name in PARTS:
        values = [getattr(step, quantity) or 0.0 for step in judged]
        part_rise = sum(values[-quarter:]) / quarter - sum(values[:quarter]) / quarter
        if rise > 0 and part_rise >= 0.3 * rise and rank_correlation(values) >= 0.5:
            grew.append(f"{name} (+{part_rise:.3g} ms of the +{rise:.3g} ms)")
    why = ", ".join(grew) or "the step's own work (what the loop keeps across steps grows)"
    place = _growing_line(ev)  # the operators that grew, whatever else rose with them
    if place is not None:
        why += (f"; of its operators, those at {site_label(place[0], place[1])} grew most (+{place[2]:.3g} ms a step over "
                "the profiled steps)")
    yield Finding(
        message=(f"the step time rises through the run: the last {quarter} judged steps' median is {ratio:.2f}x the "
                 f"first {quarter}'s (rank correlation {correlation:.2f} over {len(judged)} steps); it grew with {why}"),
        impact=min(1.0, ratio - 1.0),
        evidence={"rank_correlation": round(correlation, 3), "last_over_first_quarter": round(ratio, 3),
                  "last_over_third_quarter": round(still, 3),
                  "judged_steps": len(judged), "grew_with": grew},
        locations=[Location.at(place[0], place[1], note=f"+{place[2]:.3g} ms a step")] if place else [],
        fix=Fix(summary="keep what the loop accumulates as plain numbers or in preallocated tensors; drop old "
                        "steps' tensors (loss.item(), not loss)",
                before="losses.append(loss)", after="losses.append(loss.item())",
                docs=["https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory"]),
    )


def _growing_line(ev: Evidence) -> tuple[str, int, float] | None:
    """The user's line whose operators' time grew most from the first profiled step to the last (its backward
    counted at its forward's line), with that growth per step in ms; None without two profiled steps or growth.
    A line is named only where its time rose from each profiled step to the next: over a few steps on a loaded
    machine one difference can be another process's noise (a normalize's line once outgrew the growing bank's)."""
    trace = ev.trace
    if trace is None or len(trace.steps) < 2:
        return None
    count = len(trace.steps)  # an op's step is its index in trace.steps
    by_line: dict[tuple[str, int], list[float]] = {}
    for op in trace.top_ops():
        ref = op.src or op.grad_of
        if ref is None or op.step is None:
            continue
        by_line.setdefault((ref.file, ref.line), [0.0] * count)[op.step] += op.dur
    rising = {place: times[-1] - times[0] for place, times in by_line.items()
              if all(later > earlier for earlier, later in zip(times, times[1:]))}
    if not rising:
        return None
    (file, line), grown_us = max(rising.items(), key=lambda item: item[1])
    return (file, line, grown_us / (count - 1) / 1000) if grown_us > 0 else None
