"""The stage table: what each stage of the supervised child runs, and the loop that runs them.

A stage takes the shared ``state`` (the spec, the loaded target) and returns its result as JSON
text, ``None`` to be skipped (``state["skip_reason"]`` says why), or raises AuditError. The same
loop serves the child process (events go over its control pipe) and the in-process Python API
(events are recorded directly), so both run, skip and record stages alike.
"""

from __future__ import annotations

import json
import time
import traceback
from typing import Any, Callable, Protocol

from advisor.errors import AuditError, StageError
from advisor.ready.probes import READY_RUNNERS

# calls runs before trace: a step that starts its own profiler cannot be profiled (nested Kineto
# sessions crash the process), and the watched calls tell in advance.
STAGES = ("load", "env", "timing", "calls", "trace", "flops", "graph", "routing", "data")
VERIFY_STAGES = ("load", "verify")
MODEL_STAGES = ("timing", "calls", "trace", "flops")  # stages that run the whole step
PROFILE_STEPS = 5


class StageEvents(Protocol):
    """Where the loop reports: the child's control pipe, or the in-process recorder."""

    def start(self, stage: str) -> None: ...
    def progress(self, stage: str, text: str) -> None: ...
    def done(self, stage: str, payload: str) -> None: ...
    def error(self, stage: str, error: StageError) -> None: ...
    def skipped(self, stage: str, reason: str) -> None: ...


def run_stages(state: dict, stages: tuple[str, ...] | list[str], events: StageEvents) -> None:
    """Run the stages in order; after a failed model step the later step stages are skipped."""
    step_failed = False
    for stage in stages:
        if stage in MODEL_STAGES and step_failed:
            events.skipped(stage, "the model step already failed in an earlier stage")
            continue
        if stage != "load" and "target" not in state:
            events.skipped(stage, "the model file did not load")
            continue
        events.start(stage)
        outcome, payload = run_stage(state, stage, _throttled(lambda text, s=stage: events.progress(s, text)))
        if outcome == "error":
            events.error(stage, payload)
            step_failed = step_failed or stage in MODEL_STAGES
        elif outcome == "skipped":
            events.skipped(stage, payload)
        else:
            events.done(stage, payload)


def run_stage(state: dict, stage: str, progress: Callable[[str], None]) -> tuple[str, Any]:
    """Run one stage: ("ok", result JSON), ("skipped", reason) or ("error", StageError)."""
    try:
        result = STAGE_RUNNERS[stage](state, progress)
    except AuditError as failure:
        return "error", failure.error
    except BaseException as unexpected:  # noqa: BLE001 - report, never die silently
        return "error", StageError(
            stage=stage, kind="internal", message=f"{type(unexpected).__name__}: {unexpected}".strip(),
            detail="".join(traceback.format_exception(unexpected)),
        )
    if result is None:
        return "skipped", state.pop("skip_reason", "not applicable")
    return "ok", result


def _throttled(send: Callable[[str], None], interval_s: float = 1.0) -> Callable[[str], None]:
    """Pass on at most one progress message per interval."""
    last = [time.monotonic()]

    def progress(text: str) -> None:
        now = time.monotonic()
        if now - last[0] >= interval_s:
            last[0] = now
            send(text)
    return progress


def _load(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.workload.target import load_target

    spec = state["spec"]
    deadline = spec.get("fetch_deadline_s", 60.0)
    if "target" not in state:  # the Python API hands over a live target
        state["target"] = load_target(spec["model_file"], spec.get("mode", "auto"), spec.get("device", "auto"), deadline)
    state["target"].prepare_feed(deadline)
    from advisor.capture.describe_target import describe_target

    return describe_target(state["target"]).model_dump_json()


def _env(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.env import capture_environment
    from advisor.files.intercept import suspended

    with suspended():  # advisor's own probing (platform runs `uname -p`): not the user's doing
        return capture_environment(state["target"].device).model_dump_json()


def _timing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.workload.step import make_step, run_user_step
    from advisor.workload.timing import time_steps

    target = state["target"]
    spec = state["spec"]
    step = make_step(target, *target.fresh())
    run_user_step("timing", target, step)  # a failing step is reported at the user's line
    timing = time_steps(
        step, target.device, warmup=spec.get("warmup", 3), min_samples=spec.get("min_samples", 10),
        budget_s=spec.get("timing_budget_s", 3.0),
        on_sample=lambda n: progress(f"{n} timed steps"),
    )
    return timing.model_dump_json()


def _trace(state: dict, progress: Callable[[str], None]) -> str | None:
    from advisor.capture.profile import record_trace
    from advisor.workload.step import make_step, run_user_step

    if state.get("step_profiles_itself"):
        state["skip_reason"] = ("the step starts its own profiler (see debug-apis); profilers cannot nest, so "
                                "advisor did not profile it: remove the profiler to get the trace-based findings")
        return None
    target = state["target"]
    spec = state["spec"]
    path = spec["trace_path"]
    step = make_step(target, *target.fresh())
    run_user_step("trace", target, step)
    try:
        record_trace(step, target.device, path, steps=spec.get("profile_steps", PROFILE_STEPS))
    except Exception:  # noqa: BLE001 - the source annotator is ours; retry plainly
        progress("source annotation failed; profiling without it")
        record_trace(step, target.device, path, steps=spec.get("profile_steps", PROFILE_STEPS), annotate=False)
    return json.dumps({"trace_path": path})


def _flops(state: dict, progress: Callable[[str], None]) -> str:
    import torch

    from advisor.capture.flops import count_flops
    from advisor.workload.step import make_step
    from advisor.workload.target import call_model, call_user

    target = state["target"]
    step = make_step(target, *target.fresh())

    def forward() -> None:  # only when counting the whole step fails: a copy of its own
        model, feed, _ = target.fresh()
        with torch.no_grad():
            call_model(model, feed.inputs)
    counted = count_flops(lambda: call_user("flops", target.path, "the model step", step),
                          forward if target.mode == "train" else None)
    return counted.model_dump_json()


def _graph(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.graph import capture_graph
    from advisor.capture.parts import capture_by_parts

    target = state["target"]
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


def _calls(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.autocast import step_autocast, watching_autocast
    from advisor.capture.calls import PROFILERS, watch_step_calls

    with watching_autocast() as seen:
        sites = watch_step_calls(state["target"])
    state["step_profiles_itself"] = any(site.runtime and site.api in PROFILERS for site in sites)
    return json.dumps({"sites": [site.model_dump() for site in sites], "autocast": step_autocast(seen)})


def _routing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.routing import measure_routing

    return json.dumps([group.model_dump() for group in measure_routing(state["target"])])


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


def _verify(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.rulekit.engine import load_rules
    from advisor.rulekit.rule import Finding
    from advisor.verify.copies import verify_all

    spec = state["spec"]
    ruleset = load_rules(spec.get("rule_dirs", []))
    findings = [Finding.model_validate(item) for item in spec["verify"]]
    measured = verify_all(state["target"], ruleset, findings, spec["budget_s"], progress,
                          together=spec.get("together", False))
    return measured.model_dump_json()


STAGE_RUNNERS: dict[str, Callable[[dict, Callable[[str], None]], str | None]] = {
    "load": _load, "env": _env, "timing": _timing, "trace": _trace, "flops": _flops, "graph": _graph,
    "calls": _calls, "routing": _routing, "data": _data, "verify": _verify,
}
STAGE_RUNNERS.update(READY_RUNNERS)  # advisor ready's stages, in advisor/ready/probes.py
