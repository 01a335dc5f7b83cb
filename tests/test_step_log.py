"""Every step of an advisor run, logged in the script's process (run/step_log.py), and the two rules that read the
log: step-outliers (the steps far above the typical one, with their causes) and step-drift (a step time that rises
through the run). Fired on recorded runs of the samples that have them, silent on the clean trainer's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from advisor.evidence import Evidence, TargetInfo, Timing
from advisor.machine.collector_pauses import CollectorPauses
from advisor.machine.step_log import LoggedStep, StepLog
from advisor.rulekit.engine import load_rules, run_rules
from advisor.script.collector import CollectorWatch
from advisor.script.inference_calls import InferenceCalls
from advisor.script.logged_steps import StepRecorder
from conftest import SAMPLES, line_of
from devkit.saved_evidence import relocated

RULES = load_rules()
RECORDED = Path(__file__).parent / "data" / "runs"  # python tests/record_evidence.py --runs
# the run rules' positives: real advisor runs of samples/scripts (tests/test_rules_on_evidence.py)
RECORDED_RUN_POSITIVES = {"gc-pauses": "gc_records", "step-outliers": "gc_records", "step-drift": "growing_history",
                          "rollout-bound": "rollout_loop"}
# memory-near-capacity's positive: gpt_block's recorded memory replayed on a GPU filled to 93% (tests/test_memory.py)
REPLAYED_POSITIVES = {"memory-near-capacity"}


def recorded_run(script: str) -> Evidence:
    recorded = json.loads(relocated((RECORDED / f"{script}.json").read_text(encoding="utf-8")))
    return Evidence(target=TargetInfo(model_file=f"{script}.py", mode="train"),
                    timing=Timing.of_samples(recorded["samples_ms"], "perf_counter", 3),
                    collector=CollectorPauses.model_validate(recorded["collector"]),
                    step_log=StepLog.model_validate(recorded["step_log"]))


def _run(evidence: Evidence, slug: str):
    runs = []
    findings, problems = run_rules(RULES, evidence, runs=runs)
    assert problems == []
    [run] = [r for r in runs if r.slug == slug]
    return [f for f in findings if f.slug == slug], run


def _logged(times: list[float], phase: str = "timed", **per_step: list) -> Evidence:
    steps = [LoggedStep(step=i + 4, phase=phase, ms=ms, **{k: v[i] for k, v in per_step.items()})
             for i, ms in enumerate(times)]
    return Evidence(target=TargetInfo(model_file="/w/train.py", mode="train"),
                    timing=Timing.of_samples(times, "perf_counter", 3), step_log=StepLog(steps=steps))


@pytest.mark.parametrize("script,slug", sorted((script, slug) for slug, script in RECORDED_RUN_POSITIVES.items()))
def test_each_recorded_positive_fires_and_the_clean_trainer_does_not(script, slug):
    [finding], run = _run(recorded_run(script), slug)
    assert run.status == "fired" and finding.impact > 0
    findings, run = _run(recorded_run("clean_train"), slug)
    assert findings == [] and run.status == "silent"


class _Window:
    """What the step log reads of the window (run/window.py) between two steps."""

    def __init__(self) -> None:
        self.collector = CollectorWatch()
        self.count, self.warmup, self.steps, self.profile_steps = 0, 3, 20, 3
        self.waiting, self.journal_spent, self.evaluating, self.done = 0.0, 0.0, False, False
        self.inference = InferenceCalls()


def test_the_script_side_log_times_each_step_and_its_saves(tmp_path):
    log, window = StepRecorder(), _Window()
    saved_before = torch.save
    try:
        log.install()
        log.step_ended(window, 0.0)  # the first step: its start is not known
        log.step_started()
        window.waiting = 0.002
        weight = torch.ones(3, requires_grad=True)
        (weight * 2).sum().backward()  # two operators recorded for backward (mul, sum)
        torch.save({"w": torch.zeros(1000)}, tmp_path / "w.pt")
        log.step_ended(window, __import__("time").perf_counter())
    finally:
        torch.save = saved_before
        window.collector.remove()
    [step] = log.steps
    assert step["step"] == 2 and step["phase"] == "warm-up" and step["data_wait_ms"] == 2.0
    assert 0 < step["save_ms"] <= step["ms"] and step["compiled_frames"] == 0 and step["autograd_nodes"] == 2
    from advisor.machine.procfs import thread_run_delay_s

    if thread_run_delay_s() is None:  # no /proc/thread-self/schedstat here: said as unknown, never as 0
        assert step["cpu_wait_ms"] is None
    else:
        assert isinstance(step["cpu_wait_ms"], float) and step["cpu_wait_ms"] >= 0


def test_a_rollout_between_updates_is_the_loops_share_not_an_outlier_stall():
    """rollout_loop's every fourth Adam step holds a rollout of 256 batch-1 forwards: rollout-bound says what share
    of the steps' time it holds, with the policy's line and the batch; step-outliers names the rollout as the long
    steps' cause but does not report the loop's own shape as stalls."""
    evidence = recorded_run("rollout_loop")
    [finding], _ = _run(evidence, "rollout-bound")
    assert finding.evidence["batch"] == 1 and finding.evidence["calls_per_rollout"] == 256
    assert finding.evidence["small_batches"] and finding.evidence["rollout_share"] >= 0.3
    assert [loc.line for loc in finding.locations] == [line_of(SAMPLES / "scripts" / "rollout_loop.py", "POLICY LINE")]
    named = {o.step for o in evidence.step_log.outliers() if any(cause.startswith("a rollout") for cause in o.causes)}
    assert named == {step.step for step in evidence.step_log.judged() if step.inference_forwards}
    findings, run = _run(evidence, "step-outliers")
    assert findings == [] and run.status == "silent"


def test_the_model_s_calls_without_grad_are_timed_on_the_model_alone():
    model, calls = torch.nn.Linear(4, 2), InferenceCalls()
    calls.watch(model)
    try:
        model(torch.randn(8, 4)).sum().backward()  # an update's forward: not counted
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(1, 4))
        taken = calls.take()
    finally:
        calls.remove()
    assert taken["inference_forwards"] == 3 and taken["inference_batch"] == 1
    assert 0 < taken["inference_ms"] <= taken["rollout_ms"]
    assert calls.take()["inference_forwards"] == 0 and not model._forward_pre_hooks


def _busy_environment_step() -> None:
    """An environment's step in pure Python: 300 µs of the interpreter's own work."""
    import time

    began, spins = time.perf_counter(), 0
    while time.perf_counter() - began < 0.0003:
        spins += 1


def test_the_time_between_the_models_calls_is_sampled_at_the_loops_lines_with_what_runs_there():
    """A rollout whose environment is pure Python between batch-1 calls (which let go of the interpreter's lock
    at every operator): the samples land in the environment, counted at the loop's line that steps it; the
    model's own calls and the update after the last call are not the rest; the timer is gone after the step."""
    import signal

    model, calls = torch.nn.Linear(4, 2), InferenceCalls()
    calls.watch(model)
    observation = torch.randn(1, 4)
    try:
        for _ in range(300):
            with torch.no_grad():
                action = model(observation).argmax()
            _busy_environment_step()  # THE ENVIRONMENT
            observation = observation + action
        model(observation).sum().backward()  # the update: after the last call
        taken = calls.take()
    finally:
        calls.remove()
    assert taken["inference_forwards"] == 300 and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGPROF) == signal.SIG_DFL
    top, *_ = calls.sampler.places()
    assert (top["file"], top["line"]) == (__file__, line_of(Path(__file__), "# THE ENVIRONMENT"))
    assert top["running"] == "test_step_log.py:_busy_environment_step" and top["share"] >= 0.5, calls.sampler.places()
    assert top["samples"] >= 20


def test_the_step_rules_numbers_are_thresholds_set_sets():
    """What makes a step an outlier or a run long enough to judge a drift is each rule's threshold (--set)."""
    from advisor.rulekit.engine import parse_settings

    outliers, drift = recorded_run("gc_records"), recorded_run("growing_history")
    assert [f.slug for f in run_rules(RULES, outliers)[0] if f.slug == "step-outliers"] == ["step-outliers"]
    lenient = parse_settings(RULES, ["step-outliers.over_median=100", "step-drift.min_steps=1000"])
    assert not [f for f in run_rules(RULES, outliers, lenient)[0] if f.slug == "step-outliers"]
    runs = []
    run_rules(RULES, drift, lenient, runs=runs)
    assert "fewer than the 1000 a rise is judged over" in next(run.why for run in runs if run.slug == "step-drift")
