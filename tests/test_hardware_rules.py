"""The hardware layer and the measurements' quality: what else used the CPUs, the quota, steal.

The fast tier reads conditions recorded for real (``tests/data/conditions``, by ``tests/record_conditions.py``:
a quiet machine, a busy-loop pinned to the measured CPU, a 0.5-core cgroup quota); the slow tier makes the
contention live, and compares an audit on a quiet machine with one beside a busy-loop.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from advisor.assembly.build import assemble_report
from advisor.evidence import Environment, Evidence, TargetInfo, Timing
from advisor.gathered import Gathered
from advisor.machine.conditions import judge
from advisor.machine.state import MeasurementConditions
from advisor.rulekit.engine import RuleConfig, load_rules, run_rules
from conftest import audit
from devkit.contention import busy_loop, cpu_quota
from devkit.saved_evidence import saved_evidence

CONDITIONS = Path(__file__).parent / "data" / "conditions"
# each hardware rule's positive: conditions recorded for real, or /proc/stat as a VM writes it
RECORDED_POSITIVES = {"shared-machine": "busy_loop.json", "cpu-quota": "quota.json",
                      "steal-time": "test_steal_is_read_from_the_hypervisors_column_of_proc_stat",
                      # nvidia-smi logs as it writes them (tests/test_gpus.py)
                      "gpu-throttled": "gpu/throttled_narrow_shared.xml", "gpu-shared": "gpu/throttled_narrow_shared.xml",
                      "pcie-link-degraded": "gpu/throttled_narrow_shared.xml"}
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def recorded(name: str) -> MeasurementConditions:
    return MeasurementConditions.model_validate(json.loads((CONDITIONS / f"{name}.json").read_text()))


def _evidence(conditions: MeasurementConditions, threads: int = 2) -> Evidence:
    timing = Timing(timer="perf_counter", warmup_steps=3, samples_ms=[5.0, 5.1, 5.2], median_ms=5.1, p25_ms=5.05,
                    p75_ms=5.15, min_ms=5.0, cv=0.01, conditions=conditions)
    env = Environment(torch_threads=threads, cpu_cores_available=conditions.cores_usable,
                      cpu_cores_logical=conditions.cores_usable)
    return Evidence(target=TargetInfo(model_file="m.py"), env=env, timing=timing)


def _findings(evidence: Evidence, slug: str):
    runs = []
    found = [f for f in run_rules(load_rules(), evidence, runs=runs)[0] if f.slug == slug]
    return found, next(r for r in runs if r.slug == slug)


# --- recorded conditions -----------------------------------------------------------------------------


def test_a_quiet_machine_is_no_finding_and_says_how_quiet():
    quiet = recorded("quiet")
    assert quiet.others_share < 0.1 and judge(quiet) == []
    for slug in ("shared-machine", "cpu-quota", "steal-time"):
        found, run = _findings(_evidence(quiet), slug)
        assert found == [] and run.status == "silent", slug
    assert _findings(_evidence(quiet), "shared-machine")[1].margin.value < 0.1


def test_a_readable_watch_over_a_block_too_short_for_the_ticks_watches_on_until_its_shares_can_be_read():
    """Verification's pairs of a fast step (10 pairs in 0.2 s): left unread, a busy machine could not be told
    from a quiet one, and an inconclusive verdict could not say why."""
    from advisor.machine.conditions import Watch

    with Watch() as plain:
        pass
    with Watch(readable=True) as readable:
        pass
    assert plain.conditions.others_cores is None and any("window lasted" in why for why in plain.conditions.unreadable)
    assert readable.conditions.others_cores is not None and readable.conditions.own_cores is not None
    assert not any("window lasted" in why for why in readable.conditions.unreadable)


def test_a_contended_report_says_so_first_and_marks_what_rests_on_shares(machine_rules):
    evidence = saved_evidence("kernel_storm").model_copy()
    evidence.timing = evidence.timing.model_copy(update={"conditions": recorded("busy_loop")})
    report = assemble_report(Gathered(evidence=evidence), RuleConfig.load())
    assert report.quality.state == "contended" and report.quality.summary.startswith("CONTENDED")
    assert "sched_setaffinity" in report.quality.summary
    shares = [f for f in report.findings if f.impact is not None and f.layer.value != "hardware"]
    assert shares and all(f.unreliable.startswith("measured while other processes used") for f in shares)
    assert all(not f.unreliable for f in report.findings if f.layer.value == "hardware")
    assert all(r.unreliable for r in report.rules if r.status == "silent" and r.margin is not None
               and r.slug not in ("shared-machine", "steal-time"))
    quiet = saved_evidence("kernel_storm").model_copy()
    quiet.timing = quiet.timing.model_copy(update={"conditions": recorded("quiet")})
    calm = assemble_report(Gathered(evidence=quiet), RuleConfig.load())
    assert calm.quality.state == "quiet" and not any(f.unreliable for f in calm.findings)
    assert not any(r.unreliable for r in calm.rules)


# --- live -----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_busy_loop_pinned_beside_a_measurement_is_seen_and_named():
    import subprocess

    # measured as advisor measures: in a fresh process of its own session (its process group is its job's:
    # the test runner's is shared with another xdist worker), pinned whole before it starts a thread
    cpu = min(os.sched_getaffinity(0))
    child_code = ("import os, sys; os.sched_setaffinity(0, {int(sys.argv[2])}); sys.path.insert(0, sys.argv[1])\n"
                  "from devkit.contention import busy_loop, spin\nfrom advisor.machine.conditions import Watch\n"
                  "with busy_loop(int(sys.argv[2])) as hog, Watch() as watch:\n    spin(1.5)\n"
                  "print(hog)\nprint(watch.conditions.model_dump_json())")
    done = subprocess.run([sys.executable, "-c", child_code, str(Path(__file__).parents[1]), str(cpu)],
                          capture_output=True, text=True, timeout=120, check=True, start_new_session=True)
    hog_line, conditions_line = done.stdout.splitlines()[-2:]
    hog, conditions = int(hog_line), MeasurementConditions.model_validate_json(conditions_line)
    assert conditions.cores_usable == 1 and conditions.others_cores >= 0.3  # the hog's share of the one CPU
    assert hog in {p.pid for p in conditions.busiest}
    assert judge(conditions)


@pytest.mark.slow
def test_a_cgroup_quota_is_read_with_its_throttling():
    import subprocess

    # two spinning threads ask for two cores: more than the quota however busy the machine (one thread sharing a
    # core with another job's may get no more than the quota, and is then never throttled)
    child_code = ("import json, sys, threading; sys.path.insert(0, sys.argv[1]); sys.stdin.readline()\n"
                  "from devkit.contention import spin\nfrom advisor.machine.conditions import Watch\n"
                  "with Watch() as watch:\n"
                  "    helper = threading.Thread(target=spin, args=(1.0,)); helper.start(); spin(1.0); helper.join()\n"
                  "print(watch.conditions.model_dump_json())")
    try:
        with cpu_quota(0.5) as procs:
            child = subprocess.Popen([sys.executable, "-c", child_code, str(Path(__file__).parents[1])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)  # a job of its own, as advisor's children are
            procs.write_text(str(child.pid))
            out, _ = child.communicate("joined\n", timeout=120)
    except OSError as refused:
        pytest.skip(f"no cgroup CPU quota can be made here: {refused}")
    conditions = MeasurementConditions.model_validate_json(out)
    assert conditions.quota_cores == 0.5 and conditions.throttled_share is not None
    assert conditions.own_cores <= 0.75  # the quota held it near half a core
    # the group is one scheduling entity: on a machine other jobs fill, it may get no more than its quota (0.49
    # of 0.5 core seen beside a busy-loop and the suite's three workers), and is then never throttled; that can
    # only be because the others held the CPUs
    assert conditions.throttled_share > 0 or conditions.others_cores >= 1.0, conditions


@pytest.mark.slow
def test_an_audit_beside_a_busy_loop_names_it_and_flips_no_verdict_silently(tmp_path, machine_rules, sample_audit):
    """The same audit on this machine as it is (the session's, which leaves the machine rules out: they are
    not compared), then with a busy-loop pinned to one of its CPUs: the busy report says so first, and every
    verdict that differs between the two is marked unreliable in it."""
    quiet = sample_audit("kernel_storm").report
    with busy_loop(min(os.sched_getaffinity(0))) as hog:
        time.sleep(0.2)
        busy = audit(SAMPLES / "kernel_storm.py", tmp_path / "busy", verify=False).report
    assert busy.errors == [] and busy.quality.state == "contended"
    assert hog in {p.pid for p in busy.quality.timing.busiest} and str(hog) in busy.quality.summary
    fired = {f.slug for f in busy.findings}
    assert "shared-machine" in fired
    hardware = {"shared-machine", "steal-time", "cpu-quota", "cpu-threads"}
    flipped = ({f.slug for f in quiet.findings} ^ fired) - hardware
    for slug in flipped:
        marks = [f.unreliable for f in busy.findings if f.slug == slug] + \
                [r.unreliable for r in busy.rules if r.slug == slug and r.status == "silent"]
        assert marks and all(marks), f"{slug} flipped between the runs without a word"


@pytest.mark.slow
def test_steps_timed_beside_a_busy_loop_are_timed_again_once_it_has_gone(tmp_path, machine_rules):
    """The busy-loop is stopped when the audit says it is waiting for quiet (the event, not a sleep): its steps
    are then timed again on the quiet machine and the report says so. Where other jobs keep the machine busy
    after the loop has gone (the suite itself run beside one), the wait runs out and the report says that."""
    import signal

    from advisor.machine.conditions import Watch

    with Watch() as before:
        time.sleep(0.5)
    seen: list[str] = []
    with busy_loop(min(os.sched_getaffinity(0))) as hog:
        def progress(text: str) -> None:
            if "waiting up to" in text and not seen:
                seen.append(text)
                os.kill(hog, signal.SIGKILL)
        report = audit(SAMPLES / "kernel_storm.py", tmp_path, wait_for_quiet_s=20, progress=progress).report
    assert report.errors == [] and seen and f"(pid {hog}," in seen[0]  # the first timing saw the loop and named it
    remeasured = report.timing.remeasured
    assert f"(pid {hog}," in remeasured and remeasured in report.quality.summary
    if not judge(before.conditions):  # a quiet machine but for the loop: quiet again once it has gone
        assert remeasured.startswith("timed again after the machine was quiet"), remeasured
        assert report.quality.state == "quiet" and hog not in {p.pid for p in report.quality.timing.busiest}
    else:
        assert remeasured.startswith("timed again") or remeasured.endswith("it did not"), remeasured


def test_diff_judges_nothing_that_rests_on_a_contended_run(machine_rules):
    """The same evidence, but with the step timed 3x slower beside a busy-loop: fp32 matmuls' share of the step
    falls under missing-amp's threshold (as it did on two vision transformers under load), and the diff says
    that verdict was decided on a contended machine instead of calling it resolved."""
    from advisor.report.compare import diff_reports, render_text

    def report_under(name: str, slowdown: float = 1.0):
        evidence = saved_evidence("missing_amp").model_copy()
        samples = [t * slowdown for t in evidence.timing.samples_ms]
        evidence.timing = evidence.timing.model_copy(update={
            "conditions": recorded(name), "samples_ms": samples, "median_ms": evidence.timing.median_ms * slowdown,
            "p25_ms": evidence.timing.p25_ms * slowdown, "p75_ms": evidence.timing.p75_ms * slowdown})
        return assemble_report(Gathered(evidence=evidence), RuleConfig.load())

    quiet, busy = report_under("quiet"), report_under("busy_loop", slowdown=3.0)
    moved = ({f.slug for f in quiet.findings} ^ {f.slug for f in busy.findings}) - {"shared-machine"}
    assert moved == {"missing-amp"}
    diff = diff_reports(quiet, busy)
    assert diff.step.contended and not diff.regressed  # 3x slower, on a machine another job held
    assert diff.added == [] and diff.resolved == []
    # the busy run's shared-machine is the runner's state then, not the code's: never added
    assert moved | ({"shared-machine"} & {f.slug for f in busy.findings}) <= {f.slug for f in diff.unreliable}
    text = render_text(diff)
    assert text.startswith("UNRELIABLE new: CONTENDED") and "not judged (a run was measured on a contended" in text
    calm = diff_reports(quiet, report_under("quiet"))
    assert calm.contended == [] and calm.unreliable == [] and not calm.step.contended


def test_a_timing_the_trace_contradicts_is_caught_and_never_blamed_on_a_quiet_machine():
    """A profiled step is never faster than a profiler-free one of the same work; on 41 real audits it took
    0.95-14x as long. A timing stage 3x slower than its own trace is flagged: contended where contention was
    measured, else inconsistent (a step misread, or one that drifts), never contended on a machine measured quiet."""
    from advisor.assembly.quality import measurement_quality
    from devkit.saved_evidence import recorded_samples

    for sample in recorded_samples():
        evidence = saved_evidence(sample)
        assert "disagree" not in measurement_quality(evidence).summary, sample
    evidence = saved_evidence("non_contiguous").model_copy()
    evidence.timing = evidence.timing.model_copy(update={"median_ms": evidence.timing.median_ms * 3,
                                                         "conditions": recorded("quiet")})
    quality = measurement_quality(evidence)
    assert quality.state == "inconsistent" and "the stages disagree: a profiled step took" in quality.summary
    assert "the machine measured quiet" in quality.summary and "CONTENDED" not in quality.summary
    evidence.timing = evidence.timing.model_copy(update={"conditions": recorded("busy_loop")})
    busy = measurement_quality(evidence)
    assert busy.state == "contended" and "the stages disagree: a profiled step took" in busy.summary


def test_verification_baselines_far_from_the_timing_stage_say_which_stage_was_busy():
    """The unchanged step, timed again beside each fix, against the timing stage's step: 3x apart, with the
    fix's pairs recorded beside a busy-loop, the report names that verification and marks the shares; within
    the spread, or a loader verification (a chunk of batches, another unit), nothing is said."""
    from advisor.assembly.quality import note_disagreeing_baselines
    from advisor.rulekit.rule import Verification

    def verified(report, baseline_ms: float, conditions: str, timed: str = "step") -> None:
        finding = next(f for f in report.findings if f.slug == "kernel-storm")
        finding.verification = Verification(status="verified", speedup=1.5, ci_low=1.4, ci_high=1.6,
                                            baseline_ms=baseline_ms, candidate_ms=baseline_ms / 1.5, samples=10,
                                            timed=timed, conditions=recorded(conditions))

    def report_quietly_timed():
        evidence = saved_evidence("kernel_storm").model_copy()
        evidence.timing = evidence.timing.model_copy(update={"conditions": recorded("quiet")})
        return assemble_report(Gathered(evidence=evidence), RuleConfig.load())

    hardware = {"shared-machine", "steal-time", "cpu-quota", "cpu-threads"}
    apart = report_quietly_timed()
    step_ms = apart.timing.median_ms
    verified(apart, step_ms * 3, "busy_loop")
    note_disagreeing_baselines(apart, hardware)
    assert apart.quality.state == "contended" and "the stages disagree: the timing stage measured" in apart.quality.summary
    assert "the verification of kernel-storm ran under contention" in apart.quality.summary
    assert all(f.unreliable for f in apart.findings if f.impact is not None and f.slug not in hardware)
    drifting = report_quietly_timed()  # 3x apart, neither stage seen contended: not the machine's doing
    verified(drifting, step_ms * 3, "quiet")
    note_disagreeing_baselines(drifting, hardware)
    assert drifting.quality.state == "inconsistent" and "neither was seen contended" in drifting.quality.summary
    assert all(f.unreliable for f in drifting.findings if f.impact is not None and f.slug not in hardware)
    for baseline_ms, timed in ((step_ms * 1.2, "step"), (step_ms * 3, "loader chunk")):
        close = report_quietly_timed()
        verified(close, baseline_ms, "quiet", timed)
        note_disagreeing_baselines(close, hardware)
        assert close.quality.state == "quiet" and not any(f.unreliable for f in close.findings), timed
