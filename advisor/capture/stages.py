"""The capture's stages in the supervised child: load the model file, record the environment, time the
step, watch its calls, profile it (the step's FLOPs are read from the trace's shapes, in the parent), measure its
memory, capture its graph, count its routing, measure its data loader. Each returns its evidence as JSON (the
parent builds Evidence from it: ``collect.py``)."""

from __future__ import annotations

import json
import math
import traceback
from typing import Any, Callable

from advisor.errors import AuditError, StageError
from advisor.sandbox.registry import StagePlan, stage
from advisor.sandbox.specs import CaptureSpec, ChildSpec

# calls runs before trace: a step that starts its own profiler cannot be profiled (nested Kineto
# sessions crash the process), and the watched calls tell in advance. The stages that time something
# (timing, trace, data) come first. From UNTIMED_FROM on, the parent reads the trace on the other core
# (collect.TraceReadAhead): Dynamo's capture, mostly single-threaded Python, is not slowed by it, where the
# memory stage's multi-threaded kernels would be (bench/README.md, "The capture's choices").
CAPTURE = StagePlan(modules=("advisor.capture.stages",),
                    stages=("load", "env", "timing", "calls", "trace", "data", "peaks", "memory", "graph", "routing"))
UNTIMED_FROM = "graph"
PROFILE_STEPS = 5
UNLABELLED_STEPS = 2  # profiled before the labelled ones, for the profiler's own first-step cost (capture/profile.py)
# A longer step is profiled over fewer steps: its ops repeat the same way each step, and the profiler's recording,
# stopping, export and parse grow with every step kept. Enough labelled steps to hold PROFILED_MS of the step, from
# MIN_PROFILE_STEPS to PROFILE_STEPS. The profiler's fixed first-step cost, which the unlabelled steps keep out, is
# lost in a step of SHORT_STEP_MS or more. The figures: bench/README.md, "The capture's choices".
PROFILED_MS, MIN_PROFILE_STEPS, SHORT_STEP_MS = 300.0, 2, 50.0
# A step that alone holds twice PROFILED_MS is profiled once: a second one holds no operator the first lacks and costs
# as much again (bench/README.md)
ONE_STEP_MS = 2 * PROFILED_MS


def profiled_steps(step_ms: float | None) -> tuple[int, int]:
    """(labelled, unlabelled) steps the trace records for a step the timing found to take ``step_ms``."""
    if step_ms is None or step_ms <= 0:
        return PROFILE_STEPS, UNLABELLED_STEPS
    if step_ms >= ONE_STEP_MS:
        return 1, 0
    labelled = min(PROFILE_STEPS, max(MIN_PROFILE_STEPS, math.ceil(PROFILED_MS / step_ms)))
    return labelled, UNLABELLED_STEPS if step_ms < SHORT_STEP_MS else 0


def leave_a_core_to_the_parent(state: dict) -> None:
    """One intra-op thread fewer from UNTIMED_FROM on, while the parent reads the trace on a core of its own
    (collect.TraceReadAhead). A parallel region with a thread on every core waits at its end for the thread that
    the parent's reading took the core from: a 32-layer GPT's deep copy for the graph capture took 0.6 s instead
    of 0.07 on 2 cores (389 tensor copies, a scheduler slice each). Nothing is timed from here on."""
    import torch

    if not state.get("core_left"):
        state["core_left"] = True
        torch.set_num_threads(max(1, torch.get_num_threads() - 1))


def warm_step(state: dict) -> Callable[[], Any]:
    """The step the timing stage warmed up (its last window's copy of the model), which the stages after it that
    run the step once or a few times share (calls, trace, memory): a fresh copy's first steps are its slowest (its
    gradients and optimizer state allocated, its pages faulted in), and those stages looked for the steady state.
    A fresh copy where the timing made none."""
    from advisor.workload.step import make_step

    if (step := state.get("warm_step")) is not None:
        return step
    target = state["target"]
    return make_step(target, *target.fresh())


@stage("load")
def _load(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.workload.target import load_target

    spec: ChildSpec = state["spec"]
    deadline = spec.fetch_deadline_s
    if "target" not in state:  # the Python API hands over a live target
        state["target"] = load_target(spec.model_file, spec.mode, spec.device, deadline)
    state["target"].prepare_feed(deadline)
    from advisor.capture.describe_target import describe_target

    return describe_target(state["target"]).model_dump_json()


@stage("env")
def _env(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.env import capture_environment
    from advisor.files.intercept import suspended

    with suspended():  # advisor's own probing (platform runs `uname -p`): not the user's doing
        return capture_environment(state["target"].device).model_dump_json()


@stage("timing", runs_the_step=True)
def _timing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.machine.conditions import quiet_wait_s
    from advisor.workload.step import copy_of_step, make_step, run_user_step
    from advisor.workload.timing import time_steps, timed_when_quiet

    target = state["target"]
    spec: CaptureSpec = state["spec"]
    first = [make_step(target, *target.fresh())]
    run_user_step("timing", target, first[0])  # a failing step: reported at the user's line

    def next_step():  # the step just run opens the first window (its first, slowest step is behind it)
        state.pop("warm_step", None)  # the last window's copy goes before the next is made
        state["warm_step"] = first.pop() if first else make_step(target, *target.fresh())
        return state["warm_step"]  # kept warm for the stages after (warm_step)

    def settled_copy(step):  # a step whose first steps were a transient: the next window starts past it
        if (copied := copy_of_step(target, step)) is not None:
            state["warm_step"] = copied
        return copied

    def time_once():
        return time_steps(next_step, target.device, on_sample=lambda n: progress(f"{n} timed steps"),
                          copy_settled=settled_copy)
    wait_s = spec.wait_for_quiet_s if spec.wait_for_quiet_s is not None else quiet_wait_s()
    timing = timed_when_quiet(time_once, wait_s, progress)
    state["step_ms"] = timing.median_ms
    return timing.model_dump_json()


@stage("trace", runs_the_step=True)
def _trace(state: dict, progress: Callable[[str], None]) -> str | None:
    from advisor.capture.profile import record_trace
    from advisor.workload.step import run_user_step

    if state.get("step_profiles_itself"):
        state["skip_reason"] = ("the step starts its own profiler (see debug-apis); profilers cannot nest, so "
                                "advisor did not profile it: remove the profiler to get the trace-based findings")
        return None
    target = state["target"]
    spec: CaptureSpec = state["spec"]
    path = spec.trace_path
    step = warm_step(state)
    if state.get("heap_warm") != "calls":  # the calls stage's step of this copy left its heap as a step wants it
        run_user_step("trace", target, step)  # the warm-up: a step's pages come back after the last stage's were freed
    steps, unlabelled = profiled_steps(state.get("step_ms"))
    warmup = 0 if "warm_step" in state else 1  # a fresh copy's first step is not yet the steady state
    try:
        record_trace(step, target.device, path, steps=steps, warmup=warmup, unlabelled=unlabelled)
    except Exception:  # noqa: BLE001 - the source annotator is ours; retry plainly
        progress("source annotation failed; profiling without it")
        record_trace(step, target.device, path, steps=steps, warmup=warmup, unlabelled=unlabelled, annotate=False)
    return json.dumps({"trace_path": path})


@stage("peaks")
def _peaks(state: dict, progress: Callable[[str], None]) -> str:
    """The machine's roofs, measured once per machine and cached (before the parent reads the trace beside)."""
    from advisor.capture.calibrate import machine_peaks
    from advisor.capture.env import device_name
    from advisor.files.intercept import suspended

    device = state["target"].device
    with suspended():  # advisor's own cache, not the user's writes
        return machine_peaks(device, device_name(device)).model_dump_json()


@stage("memory", runs_the_step=True)
def _memory(state: dict, progress: Callable[[str], None]) -> str:
    """The step's memory by kind over a few steps of the warm copy, and a larger batch timed beside it."""
    from advisor.capture.memory import measure_memory
    from advisor.workload.target import call_user

    target = state["target"]
    step = warm_step(state)
    measured = call_user("memory", target.path, "the model step", lambda: measure_memory(target, step, state.get("step_ms")))
    return measured.model_dump_json()


@stage("graph")
def _graph(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.graph import capture_graph
    from advisor.capture.parts import capture_by_parts

    target = state["target"]
    leave_a_core_to_the_parent(state)
    state.pop("warm_step", None)  # from here on each stage makes its own copy: the step's one goes
    model, feed, _ = target.fresh()
    try:
        capture = capture_graph(model, feed.inputs)
    except Exception as failure:  # noqa: BLE001 - Dynamo raises many types
        text = str(failure).strip().splitlines()
        whole = f"TorchDynamo could not capture the whole model ({type(failure).__name__}: {text[0] if text else ''})"
        progress("whole-model capture failed; capturing submodules")
        try:
            capture = capture_by_parts(target.fresh()[0], feed.inputs, whole)
        except Exception as by_parts:  # noqa: BLE001
            raise AuditError(StageError(
                stage="graph", kind="unsupported", message=f"{whole}, nor any submodule on its own",
                detail="".join(traceback.format_exception(failure) + traceback.format_exception(by_parts)),
            )) from None
    return capture.model_dump_json()


@stage("calls", runs_the_step=True)
def _calls(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.calls import watch_step_calls
    from advisor.opnames import PROFILERS
    from advisor.workload.autocast import step_autocast, watching_autocast

    with watching_autocast() as seen:
        sites = watch_step_calls(state["target"], state.get("warm_step"))
    if state.get("warm_step") is not None:
        state["heap_warm"] = "calls"  # the trace steps the same copy next: its warm-up is this step
    state["step_profiles_itself"] = any(site.runtime and site.api in PROFILERS for site in sites)
    return json.dumps({"sites": [site.model_dump() for site in sites], "autocast": step_autocast(seen)})


@stage("routing")
def _routing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.routing import measure_routing

    leave_a_core_to_the_parent(state)
    return json.dumps([group.model_dump() for group in measure_routing(state["target"])])


@stage("data")
def _data(state: dict, progress: Callable[[str], None]) -> str | None:
    from advisor.capture.data import measure_loader
    from advisor.workload.target import call_user

    target = state["target"]
    if target.get_dataloader is None:
        state["skip_reason"] = "the model file defines no get_dataloader()"
        return None
    loader = call_user("data", target.path, "get_dataloader()", target.get_dataloader)
    if not hasattr(loader, "__iter__"):
        raise AuditError(StageError(stage="data", kind="user-code",
                                    message=f"get_dataloader() returned {type(loader).__name__}, which is not iterable"))
    defined_at = (target.path, target.get_dataloader.__code__.co_firstlineno)
    info = call_user("data", target.path, "iterating the data loader",
                     lambda: measure_loader(loader, on_batch=lambda n: progress(f"{n} batches"), fallback_source=defined_at))
    return info.model_dump_json()
