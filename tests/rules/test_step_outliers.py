"""step-outliers (ADV144): A few steps of the run far slower than the rest, and what was in them. Its cases: the
bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import sys

import pytest
from test_step_log import _logged, _run, recorded_run

from advisor.machine.step_log import LoggedStep
from conftest import SAMPLES
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("step-outliers")


def test_the_recorded_collector_pass_is_the_outlier_and_its_cause():
    [finding], _ = _run(recorded_run("gc_records"), "step-outliers")
    slowest = max(finding.evidence["outliers"], key=lambda o: o["ms"])
    assert slowest["causes"][0].startswith("garbage collection")
    assert f"step {slowest['step']} " in finding.message and slowest["ms"] > 10 * finding.evidence["typical_step_ms"]


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
