"""Python's garbage collector takes a large share of the training loop.

What it detects:
    An ``advisor run`` of a script whose timed steps spend at least ``min_share`` of their time inside the
    cyclic garbage collector's passes (timed by ``gc.callbacks`` around every pass in the script's process).

Why it matters:
    Each pass stops the Python thread while it walks every tracked object of its generation, and a full pass
    walks every object that ever survived one. A loop that keeps thousands of tracked objects a step — per-sample
    records holding a list, dicts of tensors kept for a report — triggers passes more and more often over a
    larger and larger heap: a trainer keeping 1,024 such records a step spent 0.85 s of its 1.58 s collecting
    over 300 steps, and ran in 0.68 s with the collector off. The passes land in a few steps, which then stand
    out as slow ones.

How to fix:
    Keep what each step records in arrays or plain numbers (a dict holding only numbers and strings is not
    tracked by the collector; one holding a list is). Where that cannot be done, call ``gc.freeze()`` once the
    set-up is done (and every so many steps), which moves the objects alive then out of every later pass, or
    raise the first generation's threshold (``gc.set_threshold(50_000, 20, 100)``): in the trainer above both
    brought the loop to 0.73 s.

Example:
    Before::

        for step, (x, y) in enumerate(loader):
            ...
            records.extend({"step": step, "pred": p, "tags": [step, i]} for i, p in enumerate(pred))

    After::

        gc.freeze()  # once the model, optimizer and loader exist
        for step, (x, y) in enumerate(loader):
            ...
            steps.append(step); preds.append(pred)  # plain lists of numbers, or one tensor per step
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.fixing import setting, with_switches
from advisor.rulekit.rule import Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import is_library_path, site_label

MOST_OF_THE_SURVIVORS = 0.25  # a line of the user's is named where it made at least this share of them
RAISED_THRESHOLDS = (50_000, 20, 100)  # the first generation's threshold raised: far fewer passes of every kind


@rule(
    slug="gc-pauses",
    code="ADV143",
    layer=Layer.APPLICATION,
    needs=("timing", "collector"),
    severity=Severity.MEDIUM,
    thresholds={
        "min_share": Threshold(0.1, "share of the timed steps spent in the garbage collector's passes"),
        "high_share": Threshold(0.3, "share at which the finding is high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    collector, timing = ev.collector, ev.timing
    steps = min(len(collector.per_step_ms), len(timing.samples_ms))
    step_total = sum(timing.samples_ms[:steps])
    collecting = sum(collector.per_step_ms[:steps])
    share = min(1.0, collecting / step_total) if step_total > 0 else 0.0
    yield ev.share_margin("garbage collector share of the step", share, th.min_share)
    if share < th.min_share:
        return
    young, middle, full = (collector.passes + [0, 0, 0])[:3]
    slowest = max(collector.per_step_ms[:steps])
    counted = sum(site["objects"] for site in collector.survivors)
    made = next((site for site in collector.survivors if site["file"] and not is_library_path(site["file"])
                 and site["objects"] >= max(MOST_OF_THE_SURVIVORS * counted, 100)), None)
    where = (f"; {made['objects']:,} objects made in one step at {site_label(made['file'], made['line'])} outlived it"
             if made else "")
    yield Finding(
        severity=Severity.HIGH if share >= th.high_share else Severity.MEDIUM,
        message=(f"Python's garbage collector takes {share:.0%} of the timed steps' time: {collecting / steps:.3g} ms a step on "
                 f"average over {steps} timed steps, {young + middle + full} passes ({full} full, {middle} of the "
                 f"middle generation), up to {slowest:.3g} ms in one step: the loop keeps objects the collector "
                 f"walks again and again{where}"),
        impact=share,
        evidence={"collector_ms_per_step": round(collecting / steps, 4), "share_of_step": round(share, 4),
                  "passes_by_generation": [young, middle, full], "slowest_step_collector_ms": round(slowest, 4),
                  "thresholds": collector.thresholds, "frozen_objects": collector.frozen,
                  "collector_enabled": collector.enabled, "survivors_of_one_step": collector.survivors},
        locations=[Location.at(made["file"], made["line"], note=f"{made['objects']:,} objects a step outlive it")]
        if made else [],
        fix=Fix(summary=("keep per-step records in arrays or plain numbers; else gc.freeze() once set-up is done, "
                         "or gc.set_threshold(50_000, 20, 100)"),
                before="records.append({'step': step, 'pred': p, 'tags': [step, i]})",
                after="gc.freeze()  # after set-up; records kept as plain numbers or arrays",
                docs=["https://docs.python.org/3/library/gc.html#gc.freeze",
                      "https://docs.python.org/3/library/gc.html#gc.set_threshold"]),
    )


@check.fix(tolerance=1e-6, what="the collector's first threshold raised (gc.set_threshold(50_000, 20, 100))",
           whole_runs="its full passes fall on a few steps of the run, which blocks of steps would share out by chance")
def fix(target, finding):
    """The script's steps with the collector's thresholds raised: the fix that needs no change to what it keeps."""
    import gc

    return with_switches(target, setting(gc.get_threshold, lambda kept: gc.set_threshold(*kept), RAISED_THRESHOLDS))
