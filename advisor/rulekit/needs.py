"""The evidence a rule needs, named once: a rule declares what it reads (``@rule(needs=("trace",))``), and
the engine does not run it where that evidence is missing, saying why the rule was silent."""

from __future__ import annotations

from typing import Any, Callable


def _flops_missing(ev: Any) -> str:
    """A count that failed is missing, never zero: its note says why."""
    if ev.flops is None:
        return "the step's FLOPs were not counted"
    return f"the step's FLOPs were not counted ({ev.flops.note or 'no reason recorded'})"


# name -> (whether the evidence has it, why not: a sentence, or one made from the evidence)
NEEDS: dict[str, tuple[Callable[[Any], bool], str | Callable[[Any], str]]] = {
    "graph": (lambda ev: ev.graph is not None, "no graph was captured"),
    "trace": (lambda ev: ev.trace is not None, "no profiler trace was recorded"),
    "timing": (lambda ev: ev.timing is not None, "the step was not timed"),
    "conditions": (lambda ev: ev.timing is not None and ev.timing.conditions is not None,
                   "the machine's load was not measured while the step was timed"),
    "flops": (lambda ev: ev.flops is not None and ev.flops.counted, _flops_missing),
    "data": (lambda ev: ev.data is not None, "no data loader was measured"),
    "env": (lambda ev: ev.env is not None, "the environment was not recorded"),
    "ddp": (lambda ev: ev.ddp is not None, "no DistributedDataParallel model was seen (a torchrun job)"),
    "collector": (lambda ev: ev.collector is not None and bool(ev.collector.per_step_ms),
                  "the garbage collector was not watched in the timed steps (advisor run watches it)"),
    "step_log": (lambda ev: ev.step_log is not None and len(ev.step_log.judged()) >= 5,
                 "fewer than five steps ran as the script runs alone (advisor run logs every step)"),
    "memory": (lambda ev: ev.memory is not None and bool(ev.memory.step_end_bytes),
               "the step's memory was not measured by kind (advisor audit measures it)"),
    "peaks": (lambda ev: ev.peaks is not None and bool(ev.peaks.flops_per_s),
              "the machine's roofs were not measured"),
    "ranks": (lambda ev: len(ev.ranks) >= 2, "fewer than two ranks' traces"),
    "cuda": (lambda ev: ev.on_cuda, "the run was not on a CUDA device, where what it judges costs time"),
}


def _why(reason: str | Callable[[Any], str], evidence: Any) -> str:
    return reason(evidence) if callable(reason) else reason


def unknown(needs: tuple[str, ...]) -> list[str]:
    return [part for need in needs for part in need.split("|") if part not in NEEDS]


def missing(needs: tuple[str, ...], evidence: Any) -> str | None:
    """Why ``evidence`` lacks what a rule needs (each need may offer alternatives: ``"graph|trace"``), or None."""
    reasons = []
    for need in needs:
        options = need.split("|")
        if not any(NEEDS[option][0](evidence) for option in options):
            reasons.append(" and ".join(_why(NEEDS[option][1], evidence) for option in options))
    return "; ".join(reasons) or None
