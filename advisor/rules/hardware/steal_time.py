"""The hypervisor took this virtual machine's CPU time while the step was timed: steal.

What it detects:
    The steal time of the CPUs this process may run on (``/proc/stat``'s eighth column: time a
    virtual CPU was ready to run but the host ran something else), as a share of those CPUs'
    time while the step was timed: at least ``min_share``.

Why it matters:
    Steal is contention one level down: the host running the VM is oversubscribed, so the
    guest's cores stop for milliseconds at a time. Nothing inside the VM shows it as another
    process, yet every operator waits for its stalled threads as it would for a busy core, and
    measurements vary with the neighbours' load, not the model.

How to fix:
    Nothing in the model: move to an instance type with dedicated cores (no burstable or
    shared-core VMs), or measure at a quieter time; treat this run's numbers as upper bounds.

Example:
    Before::

        # a shared-core cloud VM: %st in top at 10-30% during training

    After::

        # a dedicated-core instance: %st at 0
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence, Margin
from advisor.machine.conditions import STEAL_SHARE, share_resolution
from advisor.rulekit.helpers import shares_unread
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule


@rule(
    slug="steal-time",
    code="ADV139",
    layer=Layer.HARDWARE,
    needs=("conditions",),
    severity=Severity.MEDIUM,
    thresholds={
        "min_share": Threshold(STEAL_SHARE, "steal time as a share of this process's CPUs' time"),
        "high_share": Threshold(0.25, "... that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding | Margin | Clean]:
    conditions = ev.timing.conditions
    steal = conditions.steal_share
    if steal is None:
        yield Clean(why=shares_unread(ev, "steal time"))
        return
    yield Margin(quantity="steal time's share of the CPUs' time", value=steal, threshold=th.min_share,
                 noise=round(max(0.01, share_resolution(conditions.wall_s)), 4))
    if steal < th.min_share:
        return
    yield Finding(
        severity=Severity.HIGH if steal >= th.high_share else Severity.MEDIUM,
        message=(f"the hypervisor stole {steal:.0%} of this VM's CPU time while the step was timed: the host is "
                 "oversubscribed, and every measurement here carries its neighbours' load"),
        evidence={"steal_share": steal, "cores_usable": conditions.cores_usable, "window_s": conditions.wall_s},
        fix=Fix(summary="an instance with dedicated cores, or a quieter time; read this run's times as upper bounds",
                docs=["https://www.kernel.org/doc/html/latest/filesystems/proc.html#miscellaneous-kernel-statistics-in-proc-stat"]),
    )


check.advice_only("steal happens on the host, outside the VM: nothing in the step can change it")
