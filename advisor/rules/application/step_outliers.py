"""A few steps of the run far slower than the rest, and what was in them.

What it detects:
    In an ``advisor run``, the steps (of those that ran as the script runs alone: timed, and under ``--full``
    every step after) that exceed the median step by half of it and by four robust deviations, each with what was
    in it above a typical step: the garbage collector's passes, a wait for data, ``torch.save``, an evaluation
    pass, Dynamo compiling, or the step's thread waiting for a CPU another process held (a rollout between the
    model's updates is the loop's shape, not a stall: rollout-bound judges it). A finding when what the
    script's own causes account for in them (their time, or a whole step of evaluation or compilation) holds at
    least ``min_share`` of the steps' time (a cause seen only
    in the first quarter of the steps is the start's, paid once, and not counted).

Why it matters:
    A step's median hides them, yet they are time the run spends: a checkpoint every 50 steps, a full pass of the
    collector over a growing heap, a recompilation on a new shape. Under data parallelism every rank waits for
    the slowest one, so one rank's outlier stalls them all.

How to fix:
    By cause: keep records out of the collector's reach or freeze it (see gc-pauses); save asynchronously and
    less often (see checkpoint-in-step); give the loader workers (see the data rules); evaluate less often or on
    another device; mark dynamic dimensions (``torch._dynamo.mark_dynamic``) or pad shapes to a few buckets so
    Dynamo stops recompiling. A step slowed by another process is the machine's: run where nothing else does.

Example:
    Step 14 took 137 ms against a typical 1.8 ms: garbage collection (130 ms). Before::

        records.append({"step": step, "tags": [step, i]})  # a full collection every so many steps

    After::

        steps.append(step)  # plain numbers: nothing for the collector to walk
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.machine.step_log import EXPLAINS, OUTLIER_DEVIATIONS, OUTLIER_OVER_MEDIAN, ROLLOUT
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

LISTED = 8  # outliers named in the message (all are in the evidence)
NOT_THE_SCRIPTS = ("another process", "unexplained")


@rule(
    slug="step-outliers",
    code="ADV144",
    layer=Layer.APPLICATION,
    needs=("step_log",),
    severity=Severity.LOW,
    thresholds={
        "min_share": Threshold(0.05, "share of the steps' time the explained outliers hold above a typical step"),
        "medium_share": Threshold(0.2, "share at which the finding is medium"),
        "over_median": Threshold(OUTLIER_OVER_MEDIAN, "share of the typical step an outlier exceeds it by, at least"),
        "deviations": Threshold(OUTLIER_DEVIATIONS, "robust deviations (1.4826 x the median absolute deviation) an "
                                                    "outlier exceeds the typical step by, at least", "count"),
        "explains": Threshold(EXPLAINS, "share of an outlier's excess a cause holds to be named as one"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    log = ev.step_log
    judged = log.judged()
    outliers = log.outliers(th.over_median, th.deviations, th.explains)
    total = sum(step.ms for step in judged)
    own = [o for o in outliers if not all(cause.startswith(NOT_THE_SCRIPTS) for cause in o.causes)]
    # a rollout between updates is the loop's shape, every time, not a stall: rollout-bound judges its share
    own = [o for o in own if not all(cause.startswith(ROLLOUT) for cause in o.causes)]
    # a cost seen only in the first quarter's steps is the start's (a loader's workers filling their queue): a
    # short window would make it look large, and a long run pays it once
    start_ends = judged[len(judged) // 4].step if len(judged) >= 4 else 0
    later = {_kind(cause) for o in own if o.step >= start_ends for cause in o.causes}
    own = [o for o in own if o.step >= start_ends or any(_kind(cause) in later for cause in o.causes)]
    share = sum(o.explained_ms for o in own) / total if total > 0 else 0.0
    yield ev.share_margin("share of the steps' time in outlier steps the script's own work explains", share,
                          th.min_share)
    if share < th.min_share:
        yield Clean(why=f"{len(outliers)} outlier step(s) of {len(judged)}, {share:.1%} of the steps' time from "
                        "the script's own work")
        return
    typical = log.typical()
    listed = "; ".join(f"step {o.step} {o.ms:.3g} ms: {', '.join(o.causes)}" for o in outliers[:LISTED])
    more = f"; and {len(outliers) - LISTED} more" if len(outliers) > LISTED else ""
    yield Finding(
        severity=Severity.MEDIUM if share >= th.medium_share else Severity.LOW,
        message=(f"{len(outliers)} of {len(judged)} steps stand out against a typical {typical:.3g} ms step; what the "
                 f"script's own work added in them is {share:.0%} of the {len(judged)} judged steps' time: {listed}{more}"),
        impact=share,
        evidence={"typical_step_ms": round(typical, 4), "judged_steps": len(judged),
                  "outliers": [o.model_dump() for o in outliers], "share_of_steps": round(share, 4)},
        fix=Fix(summary="remove the cause named for each step: the collector (gc-pauses), saves (asynchronous, "
                        "less often), the loader (workers), evaluation (less often), recompilation (dynamic shapes)",
                docs=["https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
                      "https://docs.python.org/3/library/gc.html"]),
    )


def _kind(cause: str) -> str:
    return cause.split(" (", 1)[0]
