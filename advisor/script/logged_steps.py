"""Every step of an audited script, in the script's process: what each took and what happened in it.

The window times a few steps alike; a step that stands out (a checkpoint, an evaluation, a full pass of the
garbage collector, a recompilation, a wait for data, another process on the CPUs) is what the user sees as a
stall. Each step's end records, from the step's start (the previous step's end, advisor's own work between the
two left out): its wall time with the wait for data, that wait, the collector's passes, the time in
``torch.save``, Dynamo's frames compiled, the autograd nodes the step's thread made (its operators recorded for
backward: more of them, more work), the time the step's thread waited for a CPU other processes held
(``/proc/thread-self/schedstat``), whether it held an evaluation, the model's calls without grad in it (a
rollout: ``inference_calls.py``), and what advisor did in it (warm-up,
timed, profiled, watched): the ``step-outliers`` and ``step-drift`` rules read it. With ``--full`` the steps
after the window are recorded too, to the script's end.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from advisor.machine.procfs import thread_run_delay_s

MOST_STEPS = 100_000  # a long run's log stops growing here (a few MB of window.json)


class StepRecorder:
    """Records each step of the script as it ends (the evidence it becomes is machine/step_log.StepLog)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.saving_s = 0.0
        self.waited_at_start = thread_run_delay_s()
        self.compiled_at_start = 0
        self.nodes_at_start: int | None = None
        self.started: float | None = None
        self.number = 0  # steps of the window's kind ended so far, evaluations among them

    def install(self) -> None:
        """``torch.save`` timed (the script's saves, wherever it calls them from)."""
        import torch

        original, log = torch.save, self

        def timed_save(*args, **kwargs):
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                log.saving_s += time.perf_counter() - began
        torch.save = timed_save

    def step_started(self) -> float:
        """The step's counters from here (advisor's own work between steps is not the step's); its clock."""
        self.saving_s = 0.0
        self.waited_at_start = thread_run_delay_s()
        self.compiled_at_start = _frames_compiled()
        self.nodes_at_start = _autograd_nodes()
        self.started = time.perf_counter()
        return self.started

    def step_ended(self, state: Any, now: float) -> None:
        """A step of the window's kind ended at ``now`` (``state``: the window's ``WindowState``, before it counts the
        step)."""
        self.number += 1
        if self.started is None or len(self.steps) >= MOST_STEPS:
            return  # the first step: its start is not known
        from advisor.files import intercept

        kept = getattr(intercept.LAYER, "spent", 0.0) - state.journal_spent  # advisor's copies of changed files
        waited, nodes = thread_run_delay_s(), _autograd_nodes()
        self.steps.append({
            "step": self.number, "phase": _phase(state), "ms": round((now - self.started - kept) * 1000, 4),
            "data_wait_ms": round(state.waiting * 1000, 4), "collector_ms": round(state.collector.step_ms, 4),
            "save_ms": round(self.saving_s * 1000, 4),
            "cpu_wait_ms": round(max(0.0, waited - self.waited_at_start) * 1000, 4) if waited is not None
            and self.waited_at_start is not None else None,
            "compiled_frames": _frames_compiled() - self.compiled_at_start, "evaluation": bool(state.evaluating),
            "autograd_nodes": nodes - self.nodes_at_start if nodes is not None and self.nodes_at_start is not None
            else None,
            **state.inference.take()})


def _phase(state: Any) -> str:
    """What advisor did in the step: only ``timed`` and ``after`` steps run as the script runs alone."""
    if state.done:
        return "after"
    number = state.count + 1
    if number <= state.warmup:
        return "warm-up"
    if number <= state.warmup + state.steps:
        return "timed"
    return "profiled" if number <= state.warmup + state.steps + state.profile_steps else "watched"


def _autograd_nodes() -> int | None:
    """The autograd nodes this thread has made so far (a counter torch keeps for the profiler's sequence numbers:
    one per operator recorded for backward), None where this torch does not expose it."""
    import torch

    counter = getattr(torch._C._autograd, "_get_sequence_nr", None)
    return int(counter()) if counter is not None else None


def _frames_compiled() -> int:
    """Frames Dynamo compiled so far (0 where it was never imported: no compile then)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return 0
    return int(dynamo_utils.counters.get("frames", {}).get("ok", 0))
