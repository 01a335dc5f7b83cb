"""The readiness checks, decided from saved evidence (pure: nothing here runs the model).

Each check returns pass / warn / fail / skipped with a message, the measured values and the
user's lines. A stage that did not run makes its check ``skipped``, with the stage's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from advisor.evidence import Location
from advisor.machine.conditions import judge
from advisor.ready.measured import Blocker, ReadyEvidence
from advisor.report.readiness import CHECK_IDS, LatencyRow, Readiness, ReadyCheck
from advisor.rulekit.thresholds import Threshold, Thresholds
from advisor.stats import run_noise_said

LIMITS_OWNER = "ready"  # --set ready.memory_warn_share=0.9
LIMITS = {
    "memory_warn_share": Threshold(0.8, "share of the device's memory at the largest batch size above which memory warns"),
    "memory_noise": Threshold(0.05, "how much of the device's memory allocator and RSS peaks move between runs: "
                                    "within it of a limit, the check is borderline"),
    "cold_start_warn_ms": Threshold(1000.0, "first call slower than this (and than cold_start_warn_ratio warm calls) "
                                            "warns: the first user feels it", "ms"),
    "cold_start_warn_ratio": Threshold(10.0, "first call over a warm one above which, with cold_start_warn_ms, it warns"),
    "cold_start_noise": Threshold(0.25, "how much a first call varies run to run (relative): within it of a limit "
                                        "the check is borderline"),
}


@dataclass
class ReadyOptions:
    latency_budget_ms: float | None = None
    precision: str = "bf16"
    precision_tolerance: float = 0.05  # of the fp32 outputs' largest magnitude
    determinism_tolerance: float = 0.0  # 0: bit for bit
    limits: Thresholds = field(default_factory=lambda: Thresholds.resolve(LIMITS))  # with --set ready.NAME=VALUE


def decide(evidence: ReadyEvidence, options: ReadyOptions) -> Readiness:
    readiness = Readiness(latency=evidence.latency, latency_budget_ms=options.latency_budget_ms,
                          precision=options.precision)
    for check_id in CHECK_IDS:
        readiness.checks.append(CHECKS[check_id](evidence, options))
    readiness.recommended_batch_size = recommended_batch_size(evidence.latency, options.latency_budget_ms)
    return readiness


def _skipped(check_id: str, evidence: ReadyEvidence, stage: str) -> ReadyCheck:
    why = evidence.skipped.get(stage, "its stage did not run")
    return ReadyCheck(id=check_id, status="skipped", message=why)


def _places(blockers: list[Blocker]) -> list[Location]:
    seen, places = set(), []
    for blocker in blockers:
        if blocker.location is not None and (key := (blocker.location.file, blocker.location.line)) not in seen:
            seen.add(key)
            places.append(blocker.location.model_copy(update={"note": blocker.message[:200]}))
    return places


def eval_mode(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    if ev.modes is None:
        return _skipped("eval-mode", ev, "ready-modes")
    left = ev.modes.training_modules
    if not left:
        return ReadyCheck(id="eval-mode", status="pass", message="no Dropout or normalisation module is in training mode")
    kinds = sorted({m.kind for m in left})
    return ReadyCheck(
        id="eval-mode", status="fail",
        message=(f"{len(left)} module(s) left in training mode ({', '.join(kinds)}): dropout drops activations at "
                 "random and batch norm uses each batch's statistics, so served outputs are wrong and vary; call "
                 "model.eval() before serving"),
        values={"modules": [m.path for m in left]},
        locations=[m.location.model_copy(update={"note": f"{m.path}: {m.kind}"}) for m in left if m.location])


def inference_mode(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    modes = ev.modes
    if modes is None:
        return _skipped("inference-mode", ev, "ready-modes")
    if modes.inference_mode_error is not None:
        error = modes.inference_mode_error
        return ReadyCheck(id="inference-mode", status="fail",
                          message=f"the forward fails under torch.inference_mode(): {error.message}",
                          locations=_places([error]))
    values = {"grad_ms": modes.grad_ms, "inference_mode_ms": modes.inference_ms}
    if modes.grad_outputs:
        return ReadyCheck(id="inference-mode", status="warn", values=values,
                          message="the forward turns autograd back on (its outputs require grad under "
                                  "torch.no_grad()): serving still records the graph; remove torch.enable_grad() "
                                  "/ set_grad_enabled(True) from the forward")
    gain = ""
    if modes.grad_ms and modes.inference_ms:
        gain = (f"; a bare call (autograd recording) took {modes.grad_ms:.3g} ms, under inference_mode "
                f"{modes.inference_ms:.3g} ms")
    return ReadyCheck(id="inference-mode", status="pass", values=values,
                      message="the forward runs under torch.inference_mode(): serve it inside "
                              "`with torch.inference_mode():`" + gain)


def export(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    if ev.export is None:
        return _skipped("export", ev, "ready-export")
    values = {"non_strict": ev.export.non_strict, "strict": ev.export.strict}
    if ev.export.non_strict and ev.export.strict:
        return ReadyCheck(id="export", status="pass", values=values,
                          message="torch.export succeeds, non-strict and strict")
    if ev.export.non_strict:
        return ReadyCheck(id="export", status="warn", values=values, locations=_places(ev.export.blockers),
                          message=f"torch.export succeeds non-strict only; strict export fails: {ev.export.error}")
    return ReadyCheck(id="export", status="fail", values=values, locations=_places(ev.export.blockers),
                      message=f"torch.export fails ({len(ev.export.blockers)} blocker(s)): {ev.export.error}")


def compile_check(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    compiled = ev.compile
    if compiled is None:
        return _skipped("compile", ev, "ready-compile")
    if compiled.error:
        return ReadyCheck(id="compile", status="fail", message=f"torch.compile cannot capture the model: {compiled.error}")
    values = {"graphs": compiled.graphs, "graph_breaks": len(compiled.breaks)}
    if compiled.fullgraph:
        return ReadyCheck(id="compile", status="pass", values=values,
                          message="one graph: torch.compile(fullgraph=True) captures the whole forward")
    reasons = "; ".join(b.message for b in compiled.breaks[:3])
    return ReadyCheck(id="compile", status="warn", values=values, locations=_places(compiled.breaks),
                      message=(f"{len(compiled.breaks)} graph break(s) split the forward into {compiled.graphs} "
                               f"graphs (fullgraph=True would fail): {reasons}"))


def recompiles(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    seen = ev.recompiles
    if seen is None:
        return _skipped("recompiles", ev, "ready-recompiles")
    if seen.compile_s is None:
        return ReadyCheck(id="recompiles", status="skipped", message=f"the compiled model ran at no batch size: {seen.error}")
    users = [r for r in seen.recompiles if r.from_user_code]
    own = [r for r in seen.recompiles if not r.from_user_code]
    values = {"graphs": seen.graphs, "batch_sizes": seen.batch_sizes, "compile_s": seen.compile_s,
              "from_user_code": len(users), "from_pytorch": len(own)}
    explained = ""
    if own:
        explained = (f"; {len(own)} recompilation(s) are PyTorch's own (the switch from static to dynamic shapes "
                     f"and the size-1 specialisation: {', '.join(f'batch {r.batch_size}' for r in own)})")
    if users:
        where = "; ".join(f"batch {r.batch_size}: {r.reason}" for r in users[:3])
        return ReadyCheck(id="recompiles", status="fail", values=values,
                          locations=[r.location.model_copy(update={"note": r.reason}) for r in users if r.location],
                          message=(f"{len(users)} recompilation(s) caused by the model's code, a shape it bakes in "
                                   f"or a branch on a size ({where}): each new batch size pays a compile in "
                                   f"serving{explained}"))
    return ReadyCheck(id="recompiles", status="pass", values=values,
                      message=f"{seen.graphs} graph(s) over batch sizes {seen.batch_sizes}, none caused by the "
                              f"model's code{explained}")


def determinism(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    found = ev.determinism
    if found is None:
        return _skipped("determinism", ev, "ready-determinism")
    values = {"max_abs_diff": found.max_abs_diff, "max_rel_diff": found.max_rel_diff,
              "tolerance": options.determinism_tolerance}
    if found.equal:
        return ReadyCheck(id="determinism", status="pass", values=values,
                          message="two calls on the same inputs give bit-identical outputs")
    if found.max_rel_diff <= options.determinism_tolerance:
        return ReadyCheck(id="determinism", status="pass", values=values,
                          message=f"two calls differ by {found.max_rel_diff:.3g} of the outputs' magnitude, within "
                                  f"the tolerance {options.determinism_tolerance:g}")
    if found.equal_when_seeded:
        ops = sorted({b.message for b in found.random_ops})
        cause = (f"random ops in the forward ({', '.join(ops)}); with the same seed the outputs are equal"
                 if ops else "the random generator: with the same seed the outputs are equal")
        return ReadyCheck(id="determinism", status="fail", values=values, locations=_places(found.random_ops),
                          message=f"two calls on the same inputs differ by {found.max_rel_diff:.3g} of the outputs' "
                                  f"magnitude: {cause}")
    ops = sorted({b.message for b in found.nondeterministic_ops})
    cause = (f"kernels without a deterministic implementation ({', '.join(ops)}); torch.use_deterministic_algorithms"
             "(True) selects deterministic ones where they exist" if ops else
             "not the random generator (equal seeds still differ): nondeterministic kernels or state kept "
             "between calls")
    return ReadyCheck(id="determinism", status="fail", values=values, locations=_places(found.nondeterministic_ops),
                      message=f"two calls on the same inputs differ by {found.max_rel_diff:.3g} of the outputs' "
                              f"magnitude: {cause}")


def _failed_sizes(rows: list[LatencyRow]) -> list[LatencyRow]:
    return [row for row in rows if row.error]


def _failure_check(check_id: str, failed: list[LatencyRow], values: dict) -> ReadyCheck:
    first = failed[0]
    return ReadyCheck(
        id=check_id, status="fail", values=values,
        message=(f"the model fails at batch size(s) {', '.join(str(r.batch_size) for r in failed)}: {first.error}"
                 + (f" ({first.error_location.label()})" if first.error_location else "")),
        locations=[r.error_location.model_copy(update={"note": f"batch {r.batch_size}: {r.error}"})
                   for r in failed if r.error_location][:1])


def latency_budget(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    rows = [row for row in ev.latency if not row.error]
    failed = _failed_sizes(ev.latency)
    if not ev.latency:
        return _skipped("latency-budget", ev, "ready-latency")
    table = {str(r.batch_size): {"p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "samples": r.samples} for r in rows}
    if failed:
        return _failure_check("latency-budget", failed, {"latency": table})
    budget = options.latency_budget_ms
    if budget is None:
        return ReadyCheck(id="latency-budget", status="skipped", values={"latency": table},
                          message="no --latency-budget given: percentiles measured, nothing to meet")
    meeting = [r for r in rows if r.p99_ms is not None and r.p99_ms <= budget]
    values = {"latency": table, "budget_ms": budget}
    busy = sorted({reason for r in rows for reason in judge(r.conditions)})
    contended = f"; unreliable here: measured while {'; '.join(busy)}" if busy else ""
    if not meeting:  # a p99 whose interval (run-to-run noise in it) reaches the budget is borderline, not a fail
        fastest = min(rows, key=lambda r: r.p99_ms or float("inf"))
        within = fastest.p99 is not None and fastest.p99.ci_low <= budget
        return ReadyCheck(id="latency-budget", status="warn" if within else "fail", values=values,
                          borderline=within or bool(contended),
                          message=f"no batch size meets p99 <= {budget:g} ms (batch {fastest.batch_size}: "
                                  f"p99 {fastest.p99_ms:.3g} ms{_interval(fastest)})"
                                  + (CROSSES if within else "") + contended)
    best = max(meeting, key=lambda r: r.batch_size)
    estimate = " (p99 from fewer than 100 calls: an estimate)" if best.p99_estimate else ""
    sure = best.p99 is not None and best.p99.ci_high <= budget
    return ReadyCheck(
        id="latency-budget", status="pass" if sure else "warn", values=values, borderline=not sure or bool(busy),
        message=(f"batch {best.batch_size} meets p99 <= {budget:g} ms: p99 {best.p99_ms:.3g} ms{_interval(best)}"
                 f"{estimate}, {best.throughput_per_s:.4g} items/s" + ("" if sure else CROSSES) + contended))


CROSSES = "; the interval crosses the budget, so this is borderline"


def _interval(row) -> str:
    """A p99's 95% interval as the message gives it, with the run-to-run noise it includes."""
    if row.p99 is None:
        return ""
    noise = run_noise_said(row)
    return f" [{row.p99.ci_low:.3g}-{row.p99.ci_high:.3g}{', ' + noise if noise else ''}]"


def memory(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    if not ev.latency:
        return _skipped("memory", ev, "ready-latency")
    rows = [row for row in ev.latency if not row.error and row.peak_memory_mb is not None]
    peaks = {str(r.batch_size): r.peak_memory_mb for r in rows}
    out_of_memory = [r for r in _failed_sizes(ev.latency) if "out of memory" in r.error.lower()]
    if out_of_memory:
        return _failure_check("memory", out_of_memory, {"peak_memory_mb": peaks})
    if not rows:
        return ReadyCheck(id="memory", status="skipped", message="no batch size ran, so no peak was measured")
    largest = max(rows, key=lambda r: r.peak_memory_mb or 0)
    available = ev.memory.available_mb if ev.memory is not None else None
    values = {"peak_memory_mb": peaks, "available_mb": available}
    if available is None:
        return ReadyCheck(id="memory", status="pass", values=values,
                          message=f"peak {largest.peak_memory_mb:.4g} MB at batch {largest.batch_size}")
    share = (largest.peak_memory_mb or 0) / available
    limits = options.limits
    status = "fail" if share > 1 else "warn" if share > limits.memory_warn_share else "pass"
    near = any(abs(share - limit) <= limits.memory_noise for limit in (limits.memory_warn_share, 1.0))
    return ReadyCheck(id="memory", status=status, values={**values, "share": round(share, 4)}, borderline=near,
                      message=(f"peak {largest.peak_memory_mb:.4g} MB at batch {largest.batch_size}: {share:.1%} of "
                               f"{ev.memory.what} ({available:.6g} MB)"))


def cold_start(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    cold = ev.cold_start
    if cold is None:
        return _skipped("cold-start", ev, "ready-cold")
    compile_s = ev.recompiles.compile_s if ev.recompiles is not None else None
    values = {"first_call_ms": cold.first_call_ms, "warm_ms": cold.warm_ms, "compile_s": compile_s}
    ratio = cold.first_call_ms / cold.warm_ms if cold.warm_ms > 0 else float("inf")
    compiled = f"; torch.compile's first call {compile_s:.3g} s" if compile_s is not None else ""
    limits = options.limits
    warn_ms, warn_ratio, noise = limits.cold_start_warn_ms, limits.cold_start_warn_ratio, limits.cold_start_noise
    slow = cold.first_call_ms > warn_ms and ratio > warn_ratio
    near = (abs(cold.first_call_ms / warn_ms - 1) <= noise and ratio > warn_ratio) or \
        (abs(ratio / warn_ratio - 1) <= noise and cold.first_call_ms > warn_ms)
    return ReadyCheck(
        id="cold-start", status="warn" if slow else "pass", values=values, borderline=near,
        message=(f"first call {cold.first_call_ms:.4g} ms against {cold.warm_ms:.3g} ms warm ({ratio:.3g}x){compiled}"
                 + ("; warm the model up (a few calls) before it takes traffic" if slow else "")))


def reduced_precision(ev: ReadyEvidence, options: ReadyOptions) -> ReadyCheck:
    found = ev.precision
    if found is None:
        return _skipped("reduced-precision", ev, "ready-precision")
    if found.error is not None:
        return ReadyCheck(id="reduced-precision", status="fail", locations=_places([found.error]),
                          message=f"the forward fails under {found.dtype} autocast: {found.error.message}")
    values = {"dtype": found.dtype, "max_abs_error": found.max_abs_error, "max_rel_error": found.max_rel_error,
              "tolerance": options.precision_tolerance, "fp32_ms": found.fp32_ms, f"{found.dtype}_ms": found.reduced_ms}
    speed = (f"; {found.fp32_ms:.3g} ms in fp32, {found.reduced_ms:.3g} ms in {found.dtype} "
             f"({found.fp32_ms / found.reduced_ms:.2f}x)" if found.fp32_ms and found.reduced_ms else
             f"; no speed measured: {found.native_note}")
    within = found.max_rel_error is not None and found.max_rel_error <= options.precision_tolerance
    return ReadyCheck(
        id="reduced-precision", status="pass" if within else "fail", values=values,
        message=(f"{found.dtype} autocast changes the outputs by {found.max_rel_error:.3g} of their magnitude "
                 f"({'within' if within else 'beyond'} the tolerance {options.precision_tolerance:g}){speed}"))


def recommended_batch_size(rows: list[LatencyRow], budget_ms: float | None) -> int | None:
    """The largest batch size whose p99 meets the budget (without a budget: none is recommended)."""
    if budget_ms is None:
        return None
    meeting = [r.batch_size for r in rows if not r.error and r.p99_ms is not None and r.p99_ms <= budget_ms]
    return max(meeting, default=None)


CHECKS: dict[str, Callable[[ReadyEvidence, ReadyOptions], ReadyCheck]] = {
    "eval-mode": eval_mode, "inference-mode": inference_mode, "export": export, "compile": compile_check,
    "recompiles": recompiles, "determinism": determinism, "latency-budget": latency_budget, "memory": memory,
    "cold-start": cold_start, "reduced-precision": reduced_precision,
}
