"""Every step of an advisor run, logged in the script's process (run/step_log.py), and the two rules that read the
log: step-outliers (the steps far above the typical one, with their causes) and step-drift (a step time that rises
through the run). Fired on recorded runs of the samples that have them, silent on the clean trainer's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from advisor.evidence import Evidence, TargetInfo, Timing
from advisor.machine.collector_pauses import CollectorPauses
from advisor.machine.step_log import LoggedStep, RolloutPlace, StepLog
from advisor.rulekit.engine import load_rules, run_rules
from advisor.rulekit.rule import Severity
from advisor.script.collector import CollectorWatch
from advisor.script.inference_calls import InferenceCalls
from advisor.script.logged_steps import StepRecorder
from conftest import SAMPLES, line_of, share_finding
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


def test_the_recorded_collector_pass_is_the_outlier_and_its_cause():
    [finding], _ = _run(recorded_run("gc_records"), "step-outliers")
    slowest = max(finding.evidence["outliers"], key=lambda o: o["ms"])
    assert slowest["causes"][0].startswith("garbage collection")
    assert f"step {slowest['step']} " in finding.message and slowest["ms"] > 10 * finding.evidence["typical_step_ms"]


def test_the_recorded_growing_history_drifts_with_its_own_work():
    [finding], _ = _run(recorded_run("growing_history"), "step-drift")
    assert finding.evidence["rank_correlation"] >= 0.6 and finding.evidence["last_over_first_quarter"] >= 1.2
    assert finding.evidence["grew_with"] == [] and "the step's own work" in finding.message


def test_each_cause_is_named_where_it_explains_the_excess():
    times = [10.0] * 16 + [40.0, 30.0, 25.0, 31.0]
    evidence = _logged(times, collector_ms=[0.2] * 16 + [29.0, 0.2, 0.2, 0.2], save_ms=[0.0] * 17 + [19.0, 0, 0],
                       evaluation=[False] * 18 + [True, False], compiled_frames=[0] * 19 + [2])
    [finding], _ = _run(evidence, "step-outliers")
    causes = {o["step"]: o["causes"] for o in finding.evidence["outliers"]}
    assert causes[20][0].startswith("garbage collection") and causes[21][0].startswith("torch.save")
    assert causes[22] == ["an evaluation pass"] and "recompilation" in causes[23][0]
    assert finding.severity.value == "medium"  # (30 + 20 + 15 + 21) / 286 of the steps' time


def test_outliers_only_another_process_explains_are_listed_but_not_a_finding():
    times = [10.0] * 18 + [30.0, 30.0]
    findings, run = _run(_logged(times, cpu_wait_ms=[0.0] * 18 + [19.0, 19.0]), "step-outliers")
    assert findings == [] and run.status == "silent" and "2 outlier step(s)" in run.why


def test_a_wait_for_data_only_at_the_start_is_listed_but_not_a_finding():
    times = [10.0] * 20
    waits = [0.0] * 20
    times[1], waits[1] = 30.0, 19.0  # the loader's workers filling their queue
    findings, run = _run(_logged(times, data_wait_ms=waits), "step-outliers")
    assert findings == [] and "1 outlier step(s)" in run.why
    times[15], waits[15] = 30.0, 19.0  # ... and again later: the loader falls behind
    [finding], _ = _run(_logged(times, data_wait_ms=waits), "step-outliers")
    assert finding.evidence["share_of_steps"] == pytest.approx(38 / 240, abs=1e-3)  # the two waits, 19 ms each


def test_a_short_collector_pass_in_a_step_another_process_slowed_explains_that_pass_only():
    times = [10.0] * 20
    collecting = [0.1] * 20
    times[10], collecting[10] = 40.0, 10.1  # 30 ms over a typical step, of which the collector's 10 ms
    findings, run = _run(_logged(times, collector_ms=collecting), "step-outliers")
    assert findings == [] and run.margin.value == pytest.approx(10 / 230, abs=1e-3)  # not the whole 30 ms


def test_a_wait_for_data_another_process_stretched_is_not_the_loaders():
    times, waits, held = [10.0] * 20, [1.0] * 20, [0.0] * 20
    for step in (6, 12, 17):  # the batch's collation descheduled: its wait and the CPU wait rise together
        times[step], waits[step], held[step] = 40.0, 26.0, 25.0
    findings, run = _run(_logged(times, data_wait_ms=waits, cpu_wait_ms=held), "step-outliers")
    assert findings == [] and run.margin.value == 0 and "3 outlier step(s)" in run.why
    held[12] = 5.0  # where the wait outlasts what other processes held, the rest is the loader's
    [finding], _ = _run(_logged(times, data_wait_ms=waits, cpu_wait_ms=held), "step-outliers")
    assert finding.evidence["share_of_steps"] == pytest.approx(20 / 290, abs=1e-3)


def test_steady_steps_and_advisors_own_steps_are_not_outliers():
    findings, run = _run(_logged([10.0, 10.4, 9.8, 10.1, 10.3, 9.9] * 3), "step-outliers")
    assert findings == [] and run.margin.value == 0
    profiled = _logged([10.0] * 8)
    profiled.step_log.steps += [LoggedStep(step=12, phase="profiled", ms=400.0), LoggedStep(step=1, phase="warm-up", ms=900.0)]
    assert _run(profiled, "step-outliers")[0] == []


def test_drift_names_the_part_of_the_step_that_grew():
    times = [10.0 + i for i in range(20)]
    [finding], _ = _run(_logged(times, collector_ms=[0.9 * i for i in range(20)]), "step-drift")
    assert finding.evidence["grew_with"][0].startswith("the garbage collector's passes")
    noisy = [10.0, 10.5, 9.8, 10.2, 10.1, 9.9, 10.3, 10.0, 10.4, 9.7, 10.2, 10.1, 9.9, 10.6, 10.0, 10.2]
    assert _run(_logged(noisy), "step-drift")[0] == []
    findings, run = _run(_logged(times[:12]), "step-drift")  # too few steps to say
    assert findings == [] and "fewer than the 20" in run.why
    filled = [10.0 + min(i, 10) for i in range(24)]  # a state that grows to its bound, then holds (L-BFGS's history)
    findings, run = _run(_logged(filled), "step-drift")
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
        torch.save({"w": torch.zeros(1000)}, tmp_path / "w.pt")
        log.step_ended(window, __import__("time").perf_counter())
    finally:
        torch.save = saved_before
        window.collector.remove()
    [step] = log.steps
    assert step["step"] == 2 and step["phase"] == "warm-up" and step["data_wait_ms"] == 2.0
    assert 0 < step["save_ms"] <= step["ms"] and step["compiled_frames"] == 0
    from advisor.machine.procfs import thread_run_delay_s

    if thread_run_delay_s() is None:  # no /proc/thread-self/schedstat here: said as unknown, never as 0
        assert step["cpu_wait_ms"] is None
    else:
        assert isinstance(step["cpu_wait_ms"], float) and step["cpu_wait_ms"] >= 0


@pytest.mark.slow
def test_advisor_run_logs_the_collectors_full_pass_in_its_step_and_names_it_as_the_cause(tmp_path):
    from advisor.commands.run import RunOptions, run_script

    script = SAMPLES / "scripts" / "gc_records.py"
    result = run_script(RunOptions(command=(sys.executable, str(script)), out_dir=str(tmp_path), verify=False))
    log = result.evidence.step_log
    judged = log.judged()
    assert len(judged) == 20 and {step.phase for step in log.steps} >= {"warm-up", "timed", "profiled"}
    full_pass = max(judged, key=lambda step: step.collector_ms)
    assert full_pass.collector_ms > 0.5 * full_pass.ms  # the step the full pass made slow is the collector's
    # whether it stands out depends on how loaded the machine makes the other steps; where it does, its cause is named
    outliers = {o.step: o for o in log.outliers()}
    if full_pass.step in outliers:
        assert outliers[full_pass.step].causes[0].startswith("garbage collection")
        assert "step-outliers" in {f.slug for f in result.report.findings}


@pytest.mark.slow
def test_advisor_run_finds_the_drift_of_a_growing_history(tmp_path):
    from advisor.commands.run import RunOptions, run_script

    script = SAMPLES / "scripts" / "growing_history.py"
    report = run_script(RunOptions(command=(sys.executable, str(script)), out_dir=str(tmp_path), verify=False)).report
    # its twenty-odd judged steps carry the rise on a quiet machine; a burst of another process's work at their start
    # can break their order (a rank correlation of -0.45 under a loaded suite), and the silence then says so
    finding = share_finding(report, "step-drift")
    if finding is None:
        return
    assert not any(part.startswith("the garbage collector") for part in finding.evidence["grew_with"])
    # the line comes from the operators' growth over the 2-5 profiled steps, which the noise of a loaded machine
    # may hide: where one is named, it is the bank's
    lines = script.read_text(encoding="utf-8").splitlines()
    grown = {number for number, line in enumerate(lines, 1) if "bank" in line and "torch" in line or "bank.T" in line}
    assert {loc.line for loc in finding.locations} <= grown


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


def test_a_rollout_before_the_first_update_is_named_where_the_window_held_none():
    """Stable-Baselines3's PPO: 2,048 batch-1 calls of the policy, then 320 updates; the window's 20 steps are all
    updates. The rollout is named at LOW (its share of the run was not seen), a batched one is not."""
    evidence = _logged([1.6] * 20)
    first = {"inference_forwards": 2048, "inference_ms": 600.0, "rollout_ms": 850.0, "inference_batch": 1}
    log = evidence.step_log.model_copy(update={"first_rollout": first, "inference_call": ("/w/ppo.py", 5)})
    [finding], _ = _run(evidence.model_copy(update={"step_log": log}), "rollout-bound")
    assert finding.severity == Severity.LOW and finding.evidence["before_first_update"]
    assert "2048 times without grad (batch 1)" in finding.message and finding.locations[0].line == 5
    batched = log.model_copy(update={"first_rollout": {**first, "inference_batch": 16}})
    findings, run = _run(evidence.model_copy(update={"step_log": batched}), "rollout-bound")
    assert findings == [] and run.status == "silent"


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


def test_the_rollouts_rest_is_named_by_its_places_once_enough_samples_were_taken():
    evidence = recorded_run("rollout_loop")
    script = str(SAMPLES / "scripts" / "rollout_loop.py")
    places = [{"file": script, "line": 70, "running": "rollout_loop.py:step", "seconds": 0.05, "share": 0.62,
               "samples": 80},
              {"file": "/venv/site-packages/on_policy.py", "line": 12, "running": "buffers.py:add", "seconds": 0.02,
               "share": 0.3, "samples": 80},
              {"file": script, "line": 64, "running": "", "seconds": 0.001, "share": 0.02, "samples": 80}]
    log = evidence.step_log.model_copy(update={"rollout_places": [RolloutPlace(**place) for place in places]})
    [finding], _ = _run(evidence.model_copy(update={"step_log": log}), "rollout-bound")
    assert "Between the calls (80 samples of the main thread): 62% at rollout_loop.py:70 (in rollout_loop.py:step" \
        not in finding.message  # the loop's own file: its function is not repeated
    assert "62% at rollout_loop.py:70, 30% at on_policy.py:12 (in buffers.py:add)" in finding.message
    assert [(loc.line, loc.note) for loc in finding.locations[1:]] == [
        (70, "between the model's calls: 62% of the sampled time, in rollout_loop.py:step")]  # a library's: said only
    few = log.model_copy(update={"rollout_places": [RolloutPlace(**{**place, "samples": 12}) for place in places]})
    [finding], _ = _run(evidence.model_copy(update={"step_log": few}), "rollout-bound")
    assert "Between the calls" not in finding.message and len(finding.locations) == 1


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
