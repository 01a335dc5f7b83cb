"""The GPU's clocks were held down while the step was timed: power cap, heat or a clocks setting.

What it detects:
    A GPU the run used whose SM clock, read as the timed window ended, was below ``max_clock_ratio`` of
    its maximum while NVML named an active reason that holds clocks down (software power cap, thermal
    or hardware slowdown, power brake, an applications-clocks setting). Idle and sync boost are no such
    reason. Read through NVML or ``nvidia-smi -q -x``; silent where neither is readable.

Why it matters:
    Kernel time scales with the SM clock: a GPU held at 60% of its clock runs compute-bound kernels about
    1.7x slower, and the loss comes and goes with the room's temperature or the rack's power budget, so
    two runs of the same model disagree for reasons no trace shows.

How to fix:
    Thermal: check the fans, the airflow and the inlet temperature (``nvidia-smi -q -d TEMPERATURE``).
    Power: see the limit against the board's default (``nvidia-smi -q -d POWER``); raise it where the
    administrator allows (``nvidia-smi -pl``). An applications-clocks setting: reset it
    (``nvidia-smi -rac``). Then measure again.

Example:
    Before::

        # nvidia-smi -q -d PERFORMANCE: SW Thermal Slowdown : Active, SM 1005 MHz of 1410

    After::

        # after cleaning the filters: SW Thermal Slowdown : Not Active, SM 1410 MHz
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence, Margin
from advisor.machine.conditions import GPU_LOW_CLOCK_RATIO
from advisor.rulekit.helpers import NO_GPU_READ
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

DOCS = ["https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"]


@rule(
    slug="gpu-throttled",
    code="ADV140",
    layer=Layer.HARDWARE,
    needs=("cuda", "conditions"),
    severity=Severity.MEDIUM,
    thresholds={
        "max_clock_ratio": Threshold(GPU_LOW_CLOCK_RATIO, "SM clock over its maximum, with a throttle reason active, below which "
                                           "it is reported"),
        "high_clock_ratio": Threshold(0.6, "... at or below which it is high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding | Margin]:
    if not any(gpu.clock_ratio is not None for gpu in ev.timing.conditions.gpus):
        yield Clean(why="no GPU's clocks were read while the step was timed" if ev.timing.conditions.gpus
                    else NO_GPU_READ)
    for gpu in ev.timing.conditions.gpus:
        ratio = gpu.clock_ratio
        if ratio is None:
            continue
        yield Margin(quantity=f"GPU {gpu.index}'s SM clock over its maximum", value=round(ratio, 4),
                     threshold=th.max_clock_ratio, noise=0.02)
        if ratio >= th.max_clock_ratio or not gpu.throttle_reasons:
            continue
        reasons = ", ".join(gpu.throttle_reasons)
        yield Finding(
            severity=Severity.HIGH if ratio <= th.high_clock_ratio else Severity.MEDIUM,
            message=(f"GPU {gpu.index} ({gpu.name}) ran at {gpu.sm_clock_mhz:.0f} of its {gpu.max_sm_clock_mhz:.0f} "
                     f"MHz SM clock ({ratio:.0%}) as the step was timed, held down by {reasons}: compute-bound "
                     "kernels run that much slower, and the times here vary with it"),
            evidence={"gpu": gpu.index, "sm_clock_mhz": gpu.sm_clock_mhz, "max_sm_clock_mhz": gpu.max_sm_clock_mhz,
                      "clock_ratio": round(ratio, 4), "throttle_reasons": gpu.throttle_reasons,
                      "read_by": gpu.source},
            fix=Fix(summary="cool or power the GPU to its full clock (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER "
                            "says which), then measure again", docs=DOCS),
        )


check.advice_only("the clocks are the machine's: its cooling, power limit or clocks setting, not the model")
