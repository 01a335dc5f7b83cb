"""The child process that runs the user's code, one stage after another.

Started by the supervisor as ``python -m advisor.capture.worker SPEC.json``. It reports on a
private pipe (fd in ``ADVISOR_CONTROL_FD``), one JSON line per event: ``start``, ``progress``,
``done`` (with the stage's result file) or ``error``. Its stdout and stderr belong to the
user's code; the supervisor captures them.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable

# calls runs before trace: a step that starts its own profiler cannot be profiled (nested Kineto
# sessions crash the process), and the watched calls tell in advance.
STAGES = ("load", "env", "timing", "calls", "trace", "flops", "graph", "routing", "data")
VERIFY_STAGES = ("load", "verify")
MODEL_STAGES = ("timing", "calls", "trace", "flops")
PROFILE_STEPS = 5  # stages that run the whole step


class Channel:
    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8", closefd=True)

    def send(self, kind: str, **data: Any) -> None:
        self._out.write(json.dumps({"kind": kind, **data}) + "\n")
        self._out.flush()


def main(spec_path: str) -> int:
    channel = Channel(int(os.environ["ADVISOR_CONTROL_FD"]))
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    workdir = spec["workdir"]

    state: dict[str, Any] = {"spec": spec}
    step_failed = False
    for stage in spec.get("stages", STAGES):
        if stage in MODEL_STAGES and step_failed:
            channel.send("skipped", stage=stage, reason="the model step already failed in an earlier stage")
            continue
        if stage != "load" and "target" not in state:
            channel.send("skipped", stage=stage, reason="the model file did not load")
            continue
        channel.send("start", stage=stage)
        progress = _throttled(lambda text, s=stage: channel.send("progress", stage=s, text=text))
        outcome, payload = run_stage(state, stage, progress)
        if outcome == "error":
            channel.send("error", stage=stage, error=payload.model_dump())
            step_failed = step_failed or stage in MODEL_STAGES
        elif outcome == "skipped":
            channel.send("skipped", stage=stage, reason=payload)
        else:
            path = os.path.join(workdir, f"{stage}.json")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(payload)
            channel.send("done", stage=stage, result=path)
    channel.send("exit")
    return 0


def run_stage(state: dict, stage: str, progress: Callable[[str], None]) -> tuple[str, Any]:
    """Run one stage: ("ok", result JSON), ("skipped", reason) or ("error", StageError)."""
    from advisor.errors import AuditError, StageError

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
    from advisor.target import load_target

    spec = state["spec"]
    state["target"] = load_target(spec["model_file"], spec.get("mode", "auto"), spec.get("device", "auto"))
    return describe_target(state["target"]).model_dump_json()


def describe_target(target: Any) -> Any:
    """The TargetInfo of a loaded target (its user objects are read, never changed)."""
    from advisor.evidence import TargetInfo
    from advisor.target import batch_size, describe_inputs

    dtypes: dict[str, int] = {}
    for parameter in target.model.parameters():
        key = str(parameter.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + parameter.numel()
    info = TargetInfo(
        model_file=target.path, model_class=type(target.model).__qualname__, mode=target.mode,
        device=str(target.device), training_flag=target.model.training,
        param_count=sum(dtypes.values()), param_dtypes=dtypes,
        input_summary=describe_inputs(target.inputs), batch_size=batch_size(target.inputs),
        has_dataloader=target.get_dataloader is not None,
    )
    for module in target.model.modules():
        name = type(module).__qualname__
        info.module_types[name] = info.module_types.get(name, 0) + 1
    if target.mode == "train" and target.get_optimizer is not None:
        _, _, optimizer = target.fresh()
        info.optimizer = type(optimizer).__name__
        info.optimizer_param_tensors = sum(len(group["params"]) for group in optimizer.param_groups)
        info.optimizer_options = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (bool, int, float, str, type(None)))}
    return info


def _env(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.env import capture_environment

    return capture_environment(state["target"].device).model_dump_json()


def _timing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.step import make_step, run_user_step
    from advisor.capture.timing import time_steps

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
    from advisor.capture.step import make_step, run_user_step

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
    from advisor.capture.flops import count_flops
    from advisor.capture.step import make_step
    from advisor.target import call_user

    target = state["target"]
    step = make_step(target, *target.fresh())
    return count_flops(lambda: call_user("flops", target.path, "the model step", step)).model_dump_json()


def _graph(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.graph import capture_graph
    from advisor.errors import AuditError, StageError

    target = state["target"]
    model, inputs, _ = target.fresh()
    try:
        capture = capture_graph(model, inputs)
    except Exception as failure:  # noqa: BLE001 - Dynamo raises many types
        text = str(failure).strip().splitlines()
        raise AuditError(StageError(
            stage="graph", kind="unsupported",
            message=f"TorchDynamo could not capture the model: {type(failure).__name__}: {text[0] if text else ''}",
            detail="".join(traceback.format_exception(failure)),
        )) from None
    return capture.model_dump_json()


def _calls(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.calls import PROFILERS, watch_step_calls

    sites = watch_step_calls(state["target"])
    state["step_profiles_itself"] = any(site.runtime and site.api in PROFILERS for site in sites)
    return json.dumps([site.model_dump() for site in sites])


def _routing(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.capture.routing import measure_routing

    return json.dumps([group.model_dump() for group in measure_routing(state["target"])])


def _data(state: dict, progress: Callable[[str], None]) -> str | None:
    from advisor.capture.data import measure_loader
    from advisor.errors import AuditError, StageError
    from advisor.target import call_user

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
    from advisor.engine import load_rules
    from advisor.rule import Finding
    from advisor.verify.run import verify_all

    spec = state["spec"]
    ruleset = load_rules(spec.get("rule_dirs", []))
    findings = [(item["index"], Finding.model_validate(item["finding"])) for item in spec["verify"]]
    results, combined = verify_all(state["target"], ruleset, findings, spec["budget_s"], progress)
    return json.dumps({
        "results": {str(index): outcome.model_dump() for index, outcome in results.items()},
        "combined": combined.model_dump() if combined is not None else None,
    })


STAGE_RUNNERS: dict[str, Callable[[dict, Callable[[str], None]], str | None]] = {
    "load": _load, "env": _env, "timing": _timing, "trace": _trace, "flops": _flops, "graph": _graph,
    "calls": _calls, "routing": _routing, "data": _data, "verify": _verify,
}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
