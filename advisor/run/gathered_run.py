"""The evidence of one ``advisor run`` of a script, read from what its window wrote (``window.py`` and the
bootstrap): the target, environment, step timing and reading, loader, trace, calls, DDP use and, under torchrun,
every rank's summary, with the script's own failures as located errors and the notes the report's first stage
says. ``commands/run.py`` hands it to the shared report assembly."""

from __future__ import annotations

import statistics

from advisor.errors import StageError
from advisor.evidence import (
    CallSite,
    DataLoaderInfo,
    DDPInfo,
    Environment,
    Evidence,
    FlopCount,
    GraphCapture,
    MeasurementConditions,
    RankSummary,
    RoutingGroup,
    StepReading,
    TargetInfo,
    Timing,
)
from advisor.gathered import Gathered, ModelOutput, StageRecord
from advisor.machine.collector_pauses import CollectorPauses
from advisor.machine.peaks import MachinePeaks
from advisor.machine.step_log import StepLog
from advisor.run.kinds import BACKWARD, FORWARD, MARKER, OPTIMIZER, PROFILER_STEP
from advisor.run.launch import ScriptRun
from advisor.sources import innermost_user_frame
from advisor.trace.parse import TraceFormatError, parse_trace
from advisor.trace.ranks import RankTrace, summarize_file
from advisor.trace.step_work import profiled_work

STEP_KINDS = {OPTIMIZER: "each optimizer step", FORWARD: "each call of the model", BACKWARD: "each backward",
              PROFILER_STEP: "each of the script's own prof.step() calls", MARKER: "each return of --step-marker"}


def gathered_run(run: ScriptRun, script: str, timeout: float) -> Gathered:
    """What one run of the script gathered: its evidence (rank 0's under torchrun, with every rank's summary), the
    errors, the stages' records and the script's output; nothing to judge when no step was timed."""
    evidence, errors, notes = _primary_evidence(run, script, timeout)
    if run.rank_folders:
        from advisor.run.rank_failures import rank_failures

        rank_failures(run, script, errors, notes)
        if len(run.rank_folders) > 1 and not evidence.rank_summaries:
            _gather_ranks(run, evidence, notes)  # a rank failed before rank 0's window ended: what the others measured
    return Gathered(evidence=evidence, errors=errors, stages=_stages(run, evidence, notes),
                    output=ModelOutput(stdout=run.stdout, stderr=run.stderr), judge=evidence.timing is not None)


def _stages(run: ScriptRun, evidence: Evidence, notes: list[str]) -> list[StageRecord]:
    return [
        StageRecord(stage="script", status="ok" if run.returncode in (0, None) and not run.timed_out else "error",
                    seconds=round(run.seconds, 3), note="; ".join(notes)),
        StageRecord(stage="timing", status="ok" if evidence.timing is not None else "skipped"),
        StageRecord(stage="trace", status="ok" if evidence.trace is not None else "skipped"),
    ]


def _primary_evidence(run: ScriptRun, script: str, timeout: float) -> tuple[Evidence, list[StageError], list[str]]:
    """The script's evidence; under torchrun, rank 0's (and every rank's table and trace)."""
    errors = list(run.errors)
    notes: list[str] = []
    target = TargetInfo(model_file=script)
    if (described := run.read("target.json")) is not None:
        target = TargetInfo.model_validate(described)
    evidence = Evidence(target=target)
    if (peaks := run.read("peaks.json")) is not None:
        evidence.peaks = MachinePeaks.model_validate(peaks)
    if (env := run.read("env.json")) is not None:
        evidence.env = Environment.model_validate(env)
    window = run.read("window.json")
    if described is None and window and window.get("kind") in (OPTIMIZER, BACKWARD):
        evidence.target.mode = "train"  # the model was not described: its mode is what the steps showed
    stopped_early = run.interrupted or bool(run.timed_out and window and window.get("interrupted") and window["steps_seen"])
    if run.interrupted:
        errors.append(StageError(stage="script", kind="interrupted", message=(
            f"interrupted ({run.stopped_by}) after {window['steps_seen'] if window else 0} step(s); the report holds "
            "what was measured until then")))
    elif stopped_early:
        errors.append(StageError(stage="timing", kind="timeout", message=(
            f"stopped at --timeout ({timeout:g} s) after {window['steps_seen']} step(s), before the step "
            "window's end; the report holds what was measured until then (lower --steps or raise --timeout)")))
    if errors and not stopped_early:
        return evidence, errors, notes
    if run.read("installed.json") is None:
        if run.timed_out:  # still starting (a slow or loaded machine takes seconds to import torch), not torch-free
            errors.append(StageError(stage="load", kind="timeout", message=(
                f"stopped at --timeout ({timeout:g} s) before the script had imported torch, so no step "
                "was reached; raise --timeout")))
        else:
            errors.append(_script_error(run, "the script never imported torch, so there is no step to audit"))
        return evidence, errors, notes
    if (unmatched := run.read("marker_unmatched.json")) is not None:
        errors.append(StageError(stage="timing", kind="user-code", message=_unmatched_marker(unmatched)))
        return evidence, errors, notes
    if window is None or not window["steps_seen"]:
        if run.interrupted:
            return evidence, errors, notes
        if run.timed_out:
            seen = run.read("progress.json")
            message = (f"no optimizer step and no forward seen in {timeout:g} s; use --step-marker"
                       if seen is None else f"the step window did not finish in {timeout:g} s "
                                            "(--timeout); lower --steps or raise --timeout")
            errors.append(StageError(stage="timing", kind="timeout", message=message))
        else:
            errors.append(_script_error(run, "the script ended before its first step"))
        return evidence, errors, notes
    samples = window["samples_ms"]
    if window.get("step"):
        evidence.target.step = StepReading.model_validate(window["step"])
        notes.append(f"a step ended at {evidence.target.step.recognised_by}; one step held "
                     f"{evidence.target.step.summary}")
    elif window["kind"] == OPTIMIZER and window.get("optimizers", 1) > 1:
        notes.append(f"a step ended at each step of the optimizer that steps least often (of the script's "
                     f"{window['optimizers']}): one whole iteration")
    else:
        notes.append("a step ended at " + STEP_KINDS.get(window["kind"], str(window["kind"])))
    if window.get("restarts_after_evaluation"):
        notes.append(f"the script evaluated inside {window['restarts_after_evaluation']} step(s) (eval mode, then "
                     "train mode again): each such step was timed from its return to train mode")
    if window.get("evaluations"):
        notes.append(f"{window['evaluations']} step(s) held an evaluation pass (the model switched to eval mode) and "
                     "were not timed")
    if window.get("ended_early"):
        notes.append(f"the script ended after {window['steps_seen']} step(s), before the window's end; audited on the "
                     "steps it ran")
    elif window.get("interrupted"):
        notes.append(f"the script was stopped by advisor ({'--timeout' if run.timed_out else run.stopped_by}) after "
                     f"{window['steps_seen']} step(s)")
    elif window.get("stopped"):
        notes.append(f"the script was stopped after {window['steps_seen']} steps (the window's end); --full lets it finish")
    if run.returncode not in (0, None) and not run.stop and not window.get("stopped"):
        errors.append(_script_error(run, f"the script failed after {window['steps_seen']} step(s); the report "
                                                  "holds what was measured until then", stage="script"))
    if not samples:
        errors.append(StageError(stage="timing", kind="user-code", message=(
            f"the script ran {window['steps_seen']} step(s), not more than the {window['warmup_steps']} warm-up "
            "step(s): nothing was timed; lower --warmup-steps")))
        return evidence, errors, notes
    evidence.timing = Timing.of_samples(samples, "perf_counter", window["warmup_steps"])
    if window.get("conditions"):
        evidence.timing.conditions = MeasurementConditions.model_validate(window["conditions"])
    if window.get("collector"):
        evidence.collector = CollectorPauses.model_validate(window["collector"])
    logged = (run.read("steps.json") or {}).get("steps") or window.get("step_log")  # --full: to the script's end
    if logged:
        evidence.step_log = StepLog.model_validate({"steps": logged, "inference_call": window.get("inference_call"),
                                                    "first_rollout": window.get("first_rollout"),
                                                    "rollout_places": window.get("rollout_places") or []})
        if (split := _iteration_split(evidence.step_log)) is not None:
            notes.append(split)
    if window["data_wait_ms"] and any(window["data_wait_ms"]):
        notes.append(f"the loop waited {statistics.median(window['data_wait_ms']):.3g} ms per step for data "
                     "(median; the step time excludes it, the data rules judge it)")
    if (skipped := run.read("profile_skipped.json")) is not None:
        errors.append(StageError(stage="trace", kind="unsupported", message=skipped["reason"]))
    if (data := run.read("data.json")) is not None:
        evidence.data = DataLoaderInfo.model_validate(data)
        evidence.target.has_dataloader = True
    if (graph := run.read("graph.json")) is not None:
        evidence.graph = GraphCapture.model_validate(graph)
    elif (failure := run.read("graph_error.json")) is not None:
        evidence.graph_error = failure["message"]
    for part in (run.read("missing.json") or {}).get("parts", []):  # advisor's own failure on this model: noted
        errors.append(StageError(stage=part["part"], kind="unsupported", message=(
            f"advisor could not read {part['facts']} ({part['message']}); those facts are missing from the report, "
            "and the rules that need them say so")))
    if (failure := run.read("describe_error.json")) is not None:
        errors.append(StageError(stage="describe", kind="unsupported", message=(
            f"describing the script's model failed ({failure['message']}); what it describes is missing from the "
            "report")))
    if (routing := run.read("routing.json")) is not None:
        evidence.routing = [RoutingGroup.model_validate(group) for group in routing["groups"]]
    if (calls := run.read("calls.json")) is not None:
        evidence.calls = [CallSite.model_validate(site) for site in calls["sites"]]
    if (ddp := run.read("ddp.json")) is not None:
        evidence.ddp = DDPInfo.model_validate(ddp)
    if run.trace_path is not None:
        try:
            evidence.trace = parse_trace(run.trace_path)
            evidence.flops = FlopCount.of_trace(evidence.trace)  # the script's own step, as the profiler recorded it
            if evidence.step_log is not None:  # what each profiled step asked of torch: whether its work grows
                evidence.step_log.profiled_work = profiled_work(evidence.trace)
        except TraceFormatError as broken:
            errors.append(StageError(stage="trace", kind="unsupported", message=str(broken)))
    if len(run.rank_folders) > 1:
        _gather_ranks(run, evidence, notes)
    return evidence, errors, notes


def _iteration_split(log: StepLog) -> str | None:
    """The iteration's time between the model's updates and its calls without grad (a rollout), where there were
    any: what a step's median does not say."""
    judged = log.judged()
    total = sum(step.ms for step in judged)
    rollout = sum(step.rollout_ms for step in judged)
    if not total or not rollout:
        return None
    model = sum(step.inference_ms for step in judged)
    calls = sum(step.inference_forwards for step in judged)
    return (f"the judged steps' {total:.4g} ms: {total - rollout:.4g} ms in the model's updates and {rollout:.4g} ms "
            f"between them in {calls} call(s) of the model without grad ({model:.4g} ms) and the work around them")


def _unmatched_marker(unmatched: dict) -> str:
    seen = ", ".join(unmatched["seen"]) or "none of the script's own"
    ran = (f"in its first {unmatched['own_steps']} step(s) of its own, so it counted no step; the script was "
           "stopped there" if unmatched["own_steps"] else "before the script ended, so it counted no step")
    return (f"--step-marker {unmatched['marker']!r} matched no function the script called {ran}. Functions it "
            f"called: {seen} (name one as qualname, Class.method, or module:qualname)")


def _gather_ranks(run: ScriptRun, evidence: Evidence, notes: list[str]) -> None:
    """Every rank's step time, data wait and communication, and its trace for the rank-aware rules."""
    for rank, folder in run.rank_folders.items():
        window = run.read("window.json", folder)
        if not window or not window["samples_ms"]:
            notes.append(f"rank {rank} timed no step")
            continue
        ddp = run.read("ddp.json", folder)
        comm = None
        if ddp and ddp.get("backward_comm_ms") is not None:
            comm = round(ddp["backward_comm_ms"] * max(ddp.get("synced_forwards_per_step", 1.0), 1.0), 4)
        step = statistics.median(window["samples_ms"])
        wait = statistics.median(window["data_wait_ms"]) if window["data_wait_ms"] else 0.0
        evidence.rank_summaries.append(RankSummary(
            rank=rank, step_ms=round(step, 4), data_wait_ms=round(wait, 4), comm_ms=comm,
            compute_ms=round(max(0.0, step - comm), 4) if comm is not None else None, steps=len(window["samples_ms"])))
        if rank == next(iter(run.rank_folders)):
            if evidence.trace is not None:
                evidence.ranks.append(RankTrace.of(evidence.trace))
            continue
        if (path := run.trace_of(folder)) is not None:
            try:
                evidence.ranks.append(summarize_file(path))
            except TraceFormatError:
                notes.append(f"rank {rank}'s trace could not be read")
    steps = [r.step_ms for r in evidence.rank_summaries]
    spread = f"; rank spread {max(steps) / min(steps):.2f}x (slowest over fastest median step)" if steps and min(steps) > 0 else ""
    notes.append(f"{len(run.rank_folders)} ranks under torchrun; the report's step and findings are rank "
                 f"{next(iter(run.rank_folders))}'s, the rank table and the rank-aware rules read them all{spread}")


def _script_error(run: ScriptRun, what: str, stage: str = "load") -> StageError:
    """The script's own failure: its traceback's last frame in the user's files, and the error line."""
    tail = [line for line in run.stderr.strip().splitlines() if line.strip()]
    file, line, _ = innermost_user_frame(run.stderr)
    code = f" (exit code {run.returncode})" if run.returncode not in (None, 0) else ""
    said = f": {tail[-1]}" if tail else ""
    return StageError(stage=stage, kind="user-code", file=file, line=line, message=f"{what}{code}{said}")
