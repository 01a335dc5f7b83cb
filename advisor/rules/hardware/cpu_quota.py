"""A cgroup CPU quota below the threads torch runs: throttled every scheduling period.

What it detects:
    The tightest CPU quota over this process's cgroup and its ancestors (cgroup v2 ``cpu.max``,
    v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), in cores, when ``torch.get_num_threads()``
    exceeds it by more than ``min_excess`` cores; or, with any quota, the cgroup's periods
    throttled while the step was timed at least ``throttled_share`` of them.

Why it matters:
    A container's quota is not its CPU count: ``os.cpu_count()`` and the affinity mask show the
    host's cores, so PyTorch starts one OpenMP thread per host core. With a 2-core quota, 64
    threads burn the whole quota in the first few milliseconds of each 100 ms period, then every
    thread is stopped until the next one: each operator waits at its barrier for throttled
    threads, and steps come out several times slower than with 2 threads.

How to fix:
    Size the thread pool from the quota, not the core count:
    ``torch.set_num_threads(max(1, int(quota_cores)))`` (or ``OMP_NUM_THREADS``), or raise the
    container's CPU limit to the threads it needs.

Example:
    Before::

        torch.set_num_threads(os.cpu_count())  # 64 on the host, under a 2-CPU limit

    After::

        torch.set_num_threads(2)  # the container's quota (cpu.max: 200000 100000)
"""

from __future__ import annotations

import math
from typing import Iterator

from advisor.evidence import Evidence
from advisor.machine.conditions import THROTTLED_SHARE
from advisor.rulekit.fixing import with_threads
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

DOCS = ["https://docs.kernel.org/scheduler/sched-bwc.html",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#utilize-openmp"]


@rule(
    slug="cpu-quota",
    code="ADV138",
    layer=Layer.HARDWARE,
    needs=("conditions", "env"),
    severity=Severity.MEDIUM,
    thresholds={
        "min_excess": Threshold(0.5, "intra-op threads above the quota, in cores, before it is reported"),
        "throttled_share": Threshold(THROTTLED_SHARE, "share of the quota's periods throttled during the timing"),
        "high_ratio": Threshold(2.0, "threads per core of quota that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding | Clean]:
    conditions, threads = ev.timing.conditions, ev.env.torch_threads
    quota = conditions.quota_cores
    if quota is None:
        yield Clean(why="no cgroup CPU quota (cpu.max) limits this process")
        return
    if not threads:
        yield Clean(why="torch's intra-op thread count was not read")
        return
    throttled = conditions.throttled_share or 0.0
    over = threads > quota + th.min_excess
    if not over and throttled < th.throttled_share:
        yield Clean(why=f"torch runs {threads} intra-op thread(s) within the CPU quota of {quota:g} cores, which "
                        f"throttled {throttled:.0%} of its periods while the step was timed")
        return
    suggested = max(1, math.floor(quota))
    problems = []
    if over:
        problems.append(f"torch runs {threads} intra-op threads under a CPU quota of {quota:g} cores")
    if throttled >= th.throttled_share:
        problems.append(f"the quota throttled {throttled:.0%} of its periods while the step was timed")
    yield Finding(
        severity=Severity.HIGH if over and threads >= th.high_ratio * quota else Severity.MEDIUM,
        message="; ".join(problems) + f" (the process sees {conditions.cores_usable} CPUs, the quota grants "
                                      f"{quota:g})",
        evidence={"quota_cores": quota, "torch_threads": threads, "throttled_share": throttled,
                  "cores_usable": conditions.cores_usable, "suggested_threads": suggested},
        fix=Fix(summary=f"torch.set_num_threads({suggested}), the quota's whole cores (or raise the CPU limit)",
                docs=DOCS),
    )


def _nothing_to_change(finding) -> str | None:
    if finding.evidence["torch_threads"] <= finding.evidence["suggested_threads"]:
        return "torch already runs no more threads than the quota's cores: raise the CPU limit instead"
    return None


@check.fix(tolerance=1e-4, what="threads = the quota's cores", expected=_nothing_to_change)
def fix(target, finding):
    """Run the step with one intra-op thread per core of the quota (reductions split differently: 1e-4)."""
    return with_threads(target, finding.evidence["suggested_threads"])
