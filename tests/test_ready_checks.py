"""advisor ready's checks decided over evidence, and the parsing they rely on: pure logic, no model run."""

from __future__ import annotations

import copy
import functools
import random
from pathlib import Path

import pytest

from advisor.evidence import TargetInfo
from advisor.ready.checks import ReadyOptions, decide
from advisor.ready.compiling import _recompile
from advisor.ready.latency import _fill, percentile_with_interval
from advisor.ready.measured import (
    Blocker,
    ColdStartEvidence,
    CompileEvidence,
    DeterminismEvidence,
    ExportEvidence,
    MemoryBudget,
    ModesEvidence,
    PrecisionEvidence,
    ReadyEvidence,
    RecompileEvidence,
    TrainingModule,
)
from advisor.ready.places import named_in
from advisor.report.readiness import LatencyRow
from advisor.report.schema import Report
from advisor.rulekit.rule import Location
from advisor.stats import percentile
from conftest import SAMPLES

MODEL = str(SAMPLES / "ready" / "size_branch.py")
SHORTENED = MODEL[-37:]  # Dynamo's guard messages cut long paths from the left, wherever the checkout lies


def _row(size: int, centre_ms: float, spread: float = 0.05, n: int = 200, drift: float = 0.0) -> LatencyRow:
    """A latency row of ``n`` seeded calls in three windows (the second ``drift`` slower, the third as much
    faster: run-to-run noise); each test gets its own copy of the one computed (its percentiles' bootstrap
    intervals are most of this file's time)."""
    return copy.deepcopy(_computed_row(size, centre_ms, spread, n, drift))


@functools.lru_cache(maxsize=None)
def _computed_row(size: int, centre_ms: float, spread: float, n: int, drift: float) -> LatencyRow:
    rng = random.Random(size)
    row = LatencyRow(batch_size=size)
    _fill(row, [[centre_ms * (1 + shift) * (1 + rng.uniform(-spread, spread)) for _ in range(n // 3)]
                for shift in (0.0, drift, -drift)])
    row.peak_memory_mb = size * 1.5
    return row


def _healthy(**changes) -> ReadyEvidence:
    evidence = ReadyEvidence(
        batch_sizes=[1, 8, 32], modes=ModesEvidence(grad_ms=0.2, inference_ms=0.15), export=ExportEvidence(non_strict=True, strict=True),
        compile=CompileEvidence(fullgraph=True, graphs=1), recompiles=RecompileEvidence(batch_sizes=[1, 8, 32], graphs=1, compile_s=2.0),
        determinism=DeterminismEvidence(), latency=[_row(1, 1.0), _row(8, 2.0), _row(32, 6.0)],
        memory=MemoryBudget(available_mb=1000.0, what="the host's available memory"),
        cold_start=ColdStartEvidence(first_call_ms=12.0, warm_ms=1.0),
        precision=PrecisionEvidence(dtype="bf16", max_abs_error=0.001, max_rel_error=0.004, native=False,
                                    native_note="this CPU has no native bf16: emulated"))
    return evidence.model_copy(update=changes)


def _statuses(evidence: ReadyEvidence, **options) -> dict[str, str]:
    return {c.id: c.status for c in decide(evidence, ReadyOptions(**options)).checks}


def test_healthy_evidence_passes_and_without_a_budget_latency_is_skipped():
    statuses = _statuses(_healthy())
    assert statuses.pop("latency-budget") == "skipped"
    assert set(statuses.values()) == {"pass"}


def test_the_budget_picks_the_largest_batch_whose_p99_meets_it_and_flags_a_borderline_one():
    readiness = decide(_healthy(), ReadyOptions(latency_budget_ms=3.0))
    assert readiness.recommended_batch_size == 8 and readiness.check("latency-budget").status == "pass"
    row8 = readiness.latency[1]
    borderline = decide(_healthy(), ReadyOptions(latency_budget_ms=(row8.p99.ms + row8.p99.ci_high) / 2))
    assert borderline.check("latency-budget").status == "warn" and "borderline" in borderline.check("latency-budget").message
    assert _statuses(_healthy(), latency_budget_ms=0.5)["latency-budget"] == "fail"


def test_a_p99_within_run_to_run_noise_of_its_budget_is_borderline_either_side():
    steady, drifting = _row(8, 2.0, spread=0.02), _row(8, 2.0, spread=0.02, drift=0.06)
    assert steady.run_noise < 0.01 < drifting.run_noise and len(drifting.windows_ms) == 3
    assert drifting.p99.ci_high - drifting.p99.ci_low > steady.p99.ci_high - steady.p99.ci_low  # the noise is in it

    def check(budget_ms: float):
        return decide(_healthy(latency=[drifting]), ReadyOptions(latency_budget_ms=budget_ms)).check("latency-budget")
    above, below = check(drifting.p99.ms * 1.04), check(drifting.p99.ms * 0.96)  # clear of the samples' own interval
    assert steady.p99.ci_high < steady.p99.ms * 1.04 and steady.p99.ci_low > steady.p99.ms * 0.96
    assert (above.status, below.status) == ("warn", "warn") and above.borderline and below.borderline
    assert "run-to-run ±" in below.message and "borderline" in below.message
    assert check(drifting.p99.ms * 2).status == "pass" and check(drifting.p99.ms / 2).status == "fail"


def test_latency_measured_beside_another_job_is_marked_and_never_a_change_for_diff():
    import json

    from advisor.machine.state import MeasurementConditions

    recorded = Path(__file__).parent / "data" / "conditions"
    busy = MeasurementConditions.model_validate(json.loads((recorded / "busy_loop.json").read_text()))
    quiet = MeasurementConditions.model_validate(json.loads((recorded / "quiet.json").read_text()))
    rows = [_row(1, 1.0), _row(8, 2.0), _row(32, 6.0)]
    for row in rows:
        row.conditions = busy
    check = decide(_healthy(latency=rows), ReadyOptions(latency_budget_ms=3.0)).check("latency-budget")
    assert check.status == "pass" and check.borderline and "unreliable here: measured while other processes" in check.message
    for row in rows:
        row.conditions = quiet
    calm = decide(_healthy(latency=rows), ReadyOptions(latency_budget_ms=3.0)).check("latency-budget")
    assert not calm.borderline and "unreliable" not in calm.message


def test_each_failure_fails_its_own_check():
    dropout = TrainingModule(path="drop", kind="Dropout", location=Location(file=MODEL, line=3))
    assert _statuses(_healthy(modes=ModesEvidence(training_modules=[dropout])))["eval-mode"] == "fail"
    blocked = ExportEvidence(blockers=[Blocker(message="data-dependent", location=Location(file=MODEL, line=15))],
                             error="GuardOnDataDependentSymNode")
    assert _statuses(_healthy(export=blocked))["export"] == "fail"
    assert _statuses(_healthy(export=ExportEvidence(non_strict=True, error="x")))["export"] == "warn"
    assert _statuses(_healthy(compile=CompileEvidence(graphs=2, breaks=[Blocker(message="generic_jump")])))["compile"] == "warn"
    noisy = DeterminismEvidence(equal=False, max_abs_diff=0.1, max_rel_diff=0.02, equal_when_seeded=True,
                                random_ops=[Blocker(message="aten::randn_like", location=Location(file=MODEL, line=14))])
    determinism = decide(_healthy(determinism=noisy), ReadyOptions()).check("determinism")
    assert determinism.status == "fail" and "aten::randn_like" in determinism.message and determinism.locations[0].line == 14
    assert _statuses(_healthy(determinism=noisy), determinism_tolerance=0.05)["determinism"] == "pass"
    off = PrecisionEvidence(dtype="bf16", max_abs_error=1.0, max_rel_error=0.3)
    assert _statuses(_healthy(precision=off))["reduced-precision"] == "fail"
    assert _statuses(_healthy(memory=MemoryBudget(available_mb=50.0)))["memory"] == "warn"  # 48 MB of 50
    assert _statuses(_healthy(memory=MemoryBudget(available_mb=40.0)))["memory"] == "fail"
    assert _statuses(_healthy(cold_start=ColdStartEvidence(first_call_ms=5000.0, warm_ms=1.0)))["cold-start"] == "warn"


def test_a_batch_size_the_model_cannot_run_fails_at_its_line_and_an_oom_fails_memory():
    broken = LatencyRow(batch_size=1, error="RuntimeError: shape '[8, 64]' is invalid",
                        error_location=Location(file=MODEL, line=15))
    readiness = decide(_healthy(latency=[broken, _row(8, 2.0)]), ReadyOptions())
    check = readiness.check("latency-budget")
    assert check.status == "fail" and check.locations[0].line == 15 and "batch size(s) 1" in check.message
    oom = LatencyRow(batch_size=64, error="OutOfMemoryError: CUDA out of memory")
    assert _statuses(_healthy(latency=[_row(8, 2.0), oom]))["memory"] == "fail"


def test_recompiles_fail_only_for_guards_of_the_users_code():
    user = _healthy(recompiles=RecompileEvidence(batch_sizes=[1, 8, 32], graphs=3, compile_s=1.0, recompiles=[
        _recompile(8, "Recompiling function forward in m.py:14\n    triggered by the following guard failure(s):\n"
                      "    - 0/0: tensor 'x' size mismatch at index 0. expected 1, actual 8", MODEL),
        _recompile(32, "Recompiling function forward in m.py:14\n    triggered by the following guard failure(s):\n"
                       f"    - 0/1: 2 <= x.size()[0] <= 16  # if x.shape[0] > 16:  # {SHORTENED}:15 "
                       "in forward (_dynamo/variables/tensor.py:2606 in evaluate_expr)", MODEL)]))
    check = decide(user, ReadyOptions()).check("recompiles")
    assert check.status == "fail" and check.values == {"graphs": 3, "batch_sizes": [1, 8, 32], "compile_s": 1.0,
                                                       "from_user_code": 1, "from_pytorch": 1}
    assert check.locations[0].line == 15  # the shortened path is the model file
    own = _recompile(1, "Recompiling function forward in m.py:14\n    triggered by the following guard failure(s):\n"
                        f"    - 0/1: 2 <= x.size()[0]  # y = self.proj(x)  # {SHORTENED}:16 in forward", MODEL)
    assert not own.from_user_code  # the size-1 specialisation, whichever line first used the size


def test_places_are_read_from_export_and_guard_messages():
    text = ('The following call raised this error:\n  File "/usr/lib/python3/site-packages/torch/x.py", line 3\n'
            f'  File "{MODEL}", line 15, in forward\n    File {MODEL}, lineno 16, in forward')
    assert [place.line for place in named_in(text, MODEL)] == [15, 16]


def test_percentiles_and_their_intervals():
    samples = [float(v) for v in range(1, 101)]
    assert percentile(samples, 50) == 50.5 and percentile(samples, 99) == 99.01
    p99 = percentile_with_interval(samples, 99)
    assert p99.ci_low <= p99.ms <= p99.ci_high
    row = _row(8, 2.0, n=60)
    assert row.p99_estimate and row.samples == 60  # a p99 from 60 calls is an estimate


def test_exit_codes_follow_the_worst_check():
    def report(evidence: ReadyEvidence) -> Report:
        return Report(target=TargetInfo(model_file=MODEL), readiness=decide(evidence, ReadyOptions()))
    assert report(_healthy()).exit_code("fail") == 0
    warned = report(_healthy(compile=CompileEvidence(graphs=2, breaks=[Blocker(message="x")])))
    assert warned.exit_code("fail") == 0 and warned.exit_code("warn") == 1
    assert report(_healthy(precision=PrecisionEvidence(dtype="bf16", max_rel_error=0.5))).exit_code("fail") == 1
    assert report(_healthy()).exit_code("fail", failed=True) == 2


def test_every_format_carries_the_failed_checks_and_the_latency_table():
    from advisor.report.html import render_html
    from advisor.report.markdown import render_markdown
    from advisor.report.sarif import render_sarif

    noisy = DeterminismEvidence(equal=False, max_abs_diff=0.1, max_rel_diff=0.02, equal_when_seeded=True,
                                random_ops=[Blocker(message="aten::randn_like", location=Location(file=MODEL, line=14))])
    report = Report(target=TargetInfo(model_file=MODEL, model_class="Noisy"),
                    readiness=decide(_healthy(determinism=noisy), ReadyOptions(latency_budget_ms=3.0)))
    html = render_html(report)
    assert html.count('class="check ') == 10 and 'class="check fail" id="check-determinism"' in html
    assert html.count('class="p99"') == 3 and 'id="budget"' in html and "<script" not in html
    markdown = render_markdown(report)
    assert "| ❌ fail | `determinism` |" in markdown and "size_branch.py:14" in markdown
    assert "Recommended batch size: **8**" in markdown
    results = __import__("json").loads(render_sarif(report))["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("determinism", "error")]


def test_the_readiness_limits_are_settable():
    from advisor.ready.checks import LIMITS, LIMITS_OWNER
    from advisor.rulekit.thresholds import SettingError, with_settings

    evidence = _healthy(memory=MemoryBudget(available_mb=80.0))  # 48 MB of 80: 60%
    assert _statuses(evidence)["memory"] == "pass"
    stricter = with_settings(LIMITS_OWNER, LIMITS, ["ready.memory_warn_share=0.5"])
    assert _statuses(evidence, limits=stricter)["memory"] == "warn"
    with pytest.raises(SettingError, match="ready.memory_warn_share"):
        with_settings(LIMITS_OWNER, LIMITS, ["ready.memory=0.5"])


def test_checks_near_their_limits_are_marked_borderline():
    row8 = _healthy().latency[1]
    crossing = decide(_healthy(), ReadyOptions(latency_budget_ms=(row8.p99.ms + row8.p99.ci_high) / 2))
    assert crossing.check("latency-budget").borderline
    assert not decide(_healthy(), ReadyOptions(latency_budget_ms=1000.0)).check("latency-budget").borderline
    near_memory = decide(_healthy(memory=MemoryBudget(available_mb=59.0)), ReadyOptions()).check("memory")
    assert near_memory.status == "warn" and near_memory.borderline  # 48 MB of 59: 81%, by the 80% warn limit
    assert not decide(_healthy(), ReadyOptions()).check("memory").borderline
    cold = decide(_healthy(cold_start=ColdStartEvidence(first_call_ms=1100.0, warm_ms=1.0)), ReadyOptions())
    assert cold.check("cold-start").status == "warn" and cold.check("cold-start").borderline
