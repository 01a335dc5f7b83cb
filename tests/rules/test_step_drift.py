"""step-drift (ADV145): The step time creeps up through the run. Its cases: the bundled samples' saved evidence
replayed, then its own."""

from __future__ import annotations

import sys

import pytest
from test_step_log import _logged, _run, recorded_run

from advisor.machine.step_log import LineWork, StepWork
from conftest import SAMPLES, line_of, share_finding
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("step-drift")


def test_the_recorded_growing_history_drifts_with_its_own_work():
    [finding], _ = _run(recorded_run("growing_history"), "step-drift")
    assert finding.evidence["rank_correlation"] >= 0.6 and finding.evidence["last_over_first_quarter"] >= 1.2
    assert finding.evidence["grew_with"] == [] and "the step's own work" in finding.message
    assert finding.evidence["work_grew"] is True  # each profiled step concatenated a longer history
    # the line whose operators' inputs grew most: the bank's product (the concatenation beside it grows less)
    script = SAMPLES / "scripts" / "growing_history.py"
    assert [loc.line for loc in finding.locations] == [line_of(script, "expect: step-drift")]


def _work(*elements: int, operators: int = 40) -> list[StepWork]:
    return [StepWork(step=i, operators=operators, elements=size,
                     lines=[LineWork(file="/w/train.py", line=12, operators=4, elements=size - 1000),
                            LineWork(file="/w/train.py", line=9, operators=36, elements=1000)])
            for i, size in enumerate(elements)]


def test_a_rise_the_steps_work_does_not_carry_is_the_machines_pace_not_a_drift():
    """gan_train's thirty iterations of 3 ms once rose 2.6x (rank correlation 0.65) on a CI runner and 1.6x (0.80) on a
    quiet one, each profiled step asking the same 96 operators on the same 2,883,471 elements: no drift of the
    script's. The same rise with growing work, or with the collector's passes growing, is one."""
    times = [3.0 + 0.15 * i for i in range(20)]
    same = _logged(times)
    same.step_log.profiled_work = _work(50_000, 50_000, 50_000)
    findings, run = _run(same, "step-drift")
    assert findings == [] and "the machine's pace" in run.why and "did not grow from one to the next" in run.why
    assert run.margin.value == 0.0
    unprofiled = _logged(times)  # no trace: whether the work grew is not known, and nothing else rose
    findings, run = _run(unprofiled, "step-drift")
    assert findings == [] and "no two profiled steps" in run.why
    elsewhere = _logged(times, cpu_wait_ms=[0.1 * i for i in range(20)])  # another process's hold grew: not the script
    elsewhere.step_log.profiled_work = _work(50_000, 50_000, 50_000)
    findings, run = _run(elsewhere, "step-drift")
    assert findings == [] and "another process's hold on the CPU, not the script's" in run.why
    growing = _logged(times)
    growing.step_log.profiled_work = _work(50_000, 60_000, 70_000)
    [finding], _ = _run(growing, "step-drift")
    assert [loc.line for loc in finding.locations] == [12] and "from 49,000 to 69,000 elements" in finding.message
    assert finding.severity == "medium" and finding.fix.after == "losses.append(loss.item())"
    solver = _logged(times, autograd_nodes=[722] * 8 + [886] * 6 + [1017, 886, 1050, 1050, 886, 1181])
    solver.step_log.profiled_work = _work(50_000, 48_000, 50_000)  # torchdiffeq's adaptive solver: its evaluations
    [finding], _ = _run(solver, "step-drift")  # vary between the profiled steps and grow through the run
    assert finding.evidence["grew_with"] == ["the operators it records for backward (722 -> 1011 a step)"]
    assert finding.severity == "low" and "adaptive solver" in finding.fix.summary  # its nature, likely: no leak
    constant = _logged(times, autograd_nodes=[24] * 20)  # gan_train's every step: 24 nodes
    constant.step_log.profiled_work = _work(50_000, 50_000, 50_000)
    assert _run(constant, "step-drift")[0] == []
    more_operators = _logged(times)
    more_operators.step_log.profiled_work = _work(50_000, 50_000, 50_000)
    for count, step in zip((40, 44, 48), more_operators.step_log.profiled_work):
        step.operators = count  # a Python loop over a growing list calls more operators of the same size
    [finding], _ = _run(more_operators, "step-drift")
    assert finding.evidence["work_grew"] is True and finding.locations == []


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
    # the line comes from the profiled steps' recorded shapes, which no load changes: the bank's product
    assert finding.evidence["work_grew"] is True
    assert [loc.line for loc in finding.locations] == [line_of(script, "expect: step-drift")]
