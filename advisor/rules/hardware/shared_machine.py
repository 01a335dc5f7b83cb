"""Other processes used this process's CPUs while the step was timed: a shared machine.

What it detects:
    While the step was timed, the CPU time other processes spent on the CPUs this process may
    run on (``/proc/stat``'s busy time of those CPUs, less this process's and its children's
    own), as a share of those CPUs: at least ``busy_share`` of them. The processes that used
    the most are named with the cores they took.

Why it matters:
    PyTorch's CPU kernels split each operator across an OpenMP thread pool and wait for the
    slowest thread. When another job holds a core, the thread on that core runs only when the
    scheduler lets it, and every operator waits for it: a step that takes 1.3 ms on a quiet
    machine was measured at 192 ms beside one busy-loop on a 2-core machine. Every number in
    this report was taken under that load, so shares and verdicts may differ on a quiet machine.

How to fix:
    Audit (and run) on a machine the job has to itself, or keep the other work off its cores
    (``taskset``, a cgroup ``cpuset``). Where the load cannot move, give torch only the cores
    left free, so that no thread waits for a core another process holds:
    ``torch.set_num_threads(free_cores)``.

Example:
    Before::

        torch.set_num_threads(os.cpu_count())  # every core, one of them busy with another job

    After::

        torch.set_num_threads(1)  # the one core left free
"""

from __future__ import annotations

import math
from typing import Iterator

from advisor.evidence import Evidence, Margin
from advisor.machine.conditions import BUSY_SHARE, share_resolution
from advisor.rulekit.fixing import with_threads
from advisor.rulekit.helpers import shares_unread
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

DOCS = ["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#utilize-openmp"]


@rule(
    slug="shared-machine",
    code="ADV137",
    layer=Layer.HARDWARE,
    needs=("conditions",),
    severity=Severity.MEDIUM,
    thresholds={
        "busy_share": Threshold(BUSY_SHARE, "other processes' CPU time, as a share of this process's CPUs"),
        "high_share": Threshold(0.4, "... that makes it high: the step's numbers are largely the other job's"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding | Margin | Clean]:
    conditions = ev.timing.conditions
    share = conditions.others_share
    if share is None:
        yield Clean(why=shares_unread(ev, "other processes' use of the CPUs"))
        return
    noise = max(0.02, share_resolution(conditions.wall_s))
    yield Margin(quantity="other processes' share of this process's CPUs", value=round(share, 4),
                 threshold=th.busy_share, noise=round(noise, 4))
    if share < th.busy_share:
        return
    free = max(1, math.floor(conditions.cores_usable - conditions.others_cores + 0.25))
    threads = ev.env.torch_threads if ev.env is not None else 0
    named = ", ".join(f"{p.command} (pid {p.pid}, {p.cores:.2f} cores)" for p in conditions.busiest)
    yield Finding(
        severity=Severity.HIGH if share >= th.high_share else Severity.MEDIUM,
        message=(f"other processes used {conditions.others_cores:.2f} of this process's {conditions.cores_usable} "
                 f"CPUs ({share:.0%}) while the step was timed" + (f": {named}" if named else "")
                 + "; every measurement here was taken under that load"
                 + (f"; torch runs {threads} threads where {free} core(s) were free" if threads > free else "")),
        evidence={"others_cores": conditions.others_cores, "others_share": round(share, 4),
                  "cores_usable": conditions.cores_usable, "cores_free": free, "torch_threads": threads,
                  "busiest": [f"{p.command} (pid {p.pid}): {p.cores:.2f} cores" for p in conditions.busiest],
                  "window_s": conditions.wall_s},
        fix=Fix(summary=("run on a machine the job has to itself, or keep other work off its cores (taskset, a "
                         "cgroup cpuset)" + (f"; else torch.set_num_threads({free}), the cores left free"
                                             if threads > free else "")),
                docs=DOCS),
    )


def _nothing_to_change(finding) -> str | None:
    if finding.evidence["torch_threads"] <= finding.evidence["cores_free"]:
        return ("torch already runs no more threads than the cores left free: the fix is to move the other work, "
                "which is outside the step")
    return None


@check.fix(tolerance=1e-4, what="threads = the cores left free", expected=_nothing_to_change)
def fix(target, finding):
    """Run the step with one intra-op thread per core the other processes left free (reductions split
    differently: 1e-4). Measured under the same load, so the verdict says what it gains beside it."""
    return with_threads(target, finding.evidence["cores_free"])
