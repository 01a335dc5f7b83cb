"""Verify findings by measurement: apply each fix to a fresh copy, compare, A/B-time the step.

Runs in the supervised child (it executes user code). Findings come in order of expected
impact; each gets a Verification. Fixes that came out ``verified`` are then applied together
and measured as one candidate. Nothing here touches the user's model or inputs: every side
of every comparison is built from ``Target.fresh()`` copies.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from advisor.evidence.memory_records import PeakMemoryAB
from advisor.rulekit.engine import RuleSet
from advisor.rulekit.rule import Finding, FixSpec, NotVerifiable, Verification
from advisor.verify.compiled import WatchedRewrite, eager_random_in_compiled_code
from advisor.verify.interleave import interleave
from advisor.verify.measure import resolution_note, smallest_resolvable, verdict, why_inconclusive
from advisor.verify.memory_ab import memory_verdict, peaks_alternately
from advisor.verify.numerics import compare, gradients_after, outputs_after, tolerance_at
from advisor.verify.orchestrate import measure_fixes
from advisor.verify.plan import MeasuredFixes
from advisor.workload.feed import Feed
from advisor.workload.peak_memory import PEAK_METHOD, PeakUnmeasurable
from advisor.workload.reduced_precision import parameter_precision
from advisor.workload.step import make_step
from advisor.workload.target import Target, call_user

WARMUP_STEPS = 3
MIN_PAIRS = 10
PER_FIX_SHARE = 0.5  # of the remaining budget one fix may spend measuring
LOADER_CHUNK = 3  # batches per loader timing sample


@dataclass
class Budget:
    seconds: float
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    @property
    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


def measure_here(target: Target, ruleset: RuleSet, findings: list[Finding], budget_s: float | None,
                 pairs: int | None = None, progress: Callable[[str], None] = lambda text: None) -> MeasuredFixes:
    """The Python API: every fix measured on copies in this process (there is no model file to run in a
    child), through the one orchestration."""
    if not findings:
        return MeasuredFixes()
    needed_s = _probe_step_ms(target) * 2 * (WARMUP_STEPS + MIN_PAIRS) / 1000

    def measure_set(chosen: list[Finding], seconds: float) -> Verification:
        fixes = [(finding, ruleset.get(finding.slug).fix_spec) for finding in chosen]
        label = chosen[0].slug if len(chosen) == 1 else "all fixes"
        return verify_one(target, fixes, Budget(seconds), progress, label, pairs)
    return measure_fixes(findings, measure_set, None if pairs else budget_s, lambda chosen: needed_s * 1.5,
                         device=str(target.device), progress=progress)


def _probe_step_ms(target: Target) -> float:
    step = make_step(target, *target.fresh())
    begin = time.perf_counter()
    call_user("verify", target.path, "the model step", step)
    return (time.perf_counter() - begin) * 1000


def verify_one(
    target: Target,
    fixes: list[tuple[Finding, FixSpec]],
    budget: Budget,
    progress: Callable[[str], None],
    label: str,
    pairs: int | None = None,
) -> Verification:
    """One candidate (the fixes applied together) against the baseline, on fresh copies: numerics, then
    interleaved timing for a share of ``budget`` (or exactly ``pairs`` pairs, whatever the time)."""
    device = str(target.device)
    for finding, spec in fixes:
        if (reason := spec.unmeasurable(finding, device)) is not None:
            return Verification(status="not-verifiable-here", device=device, note=reason)
    candidate = target
    try:
        for finding, spec in fixes:
            candidate = spec.apply(candidate, finding)
    except NotVerifiable as reason:
        return Verification(status="not-verifiable-here", device=device, note=str(reason))
    except Exception as broken:  # noqa: BLE001 - a fix is code too
        return Verification(status="fix-failed", device=device, note=f"applying the fix raised {type(broken).__name__}: {broken}")
    if candidate is target:
        return Verification(status="fix-failed", device=device, note="the fix returned the target unchanged")
    tolerance = max(spec.tolerance_for(finding) for finding, spec in fixes)
    if candidate.loader_options != target.loader_options:
        return _verify_loader(target, candidate, budget, progress, label, pairs)
    rewrite = None
    if candidate.compile_backend is not None:
        rewrite = WatchedRewrite(candidate.compile_backend)
        candidate = dataclasses.replace(candidate, compile_backend=rewrite)
    measure = _memory_measured if any(spec.measures == "memory" for _, spec in fixes) else _interleaved
    try:
        return _verify_step(target, candidate, tolerance, budget, progress, label, rewrite, pairs, measure)
    except Exception as broken:  # noqa: BLE001 - the fixed copy may not run at all
        return Verification(status="fix-failed", device=device, tolerance=tolerance,
                            note=f"the fixed copy raised {type(broken).__name__}: {str(broken).splitlines()[0] if str(broken) else ''}")


def _verify_step(target: Target, candidate: Target, tolerance: float | None, budget: Budget,
                 progress: Callable[[str], None], label: str, rewrite: WatchedRewrite | None = None,
                 pairs: int | None = None, measure: Callable[..., Verification] | None = None) -> Verification:
    """Numerics on the feed's first batch, then ``measure`` (the interleaved timing of the step; a memory fix's
    peaks and its cost)."""
    measure = measure or _interleaved
    device = str(target.device)
    base_model, base_feed, base_opt = target.fresh()
    cand_model, cand_feed, cand_opt = candidate.fresh()
    base_step = make_step(target, base_model, base_feed, base_opt)
    cand_step = make_step(candidate, cand_model, cand_feed, cand_opt)
    if tolerance is None:  # advisor diff --remeasure: two revisions of the code, whose outputs may differ by design
        return _interleaved(target, base_step, cand_step, budget, progress, label, pairs, {"device": device},
                            "timing only: two revisions of the code compared, their outputs not")
    with eager_random_in_compiled_code():
        torch.manual_seed(0)
        base = _first_result(target, base_model, base_feed, base_step)
        torch.manual_seed(0)
        began = time.perf_counter()
        cand = _first_result(candidate, cand_model, cand_feed, cand_step)
        first_call_s = time.perf_counter() - began
    if rewrite is not None and (unapplied := rewrite.unapplied()) is not None:
        return Verification(status="not-verifiable-here", device=device,
                            note=f"{unapplied}: the fix was not applied, so not measured")
    comparison = compare(base, cand)
    compile_s = round(first_call_s, 3) if candidate.compiled else None
    tolerance, raised = tolerance_at(tolerance, parameter_precision(base_model))
    errors = dict(max_abs_error=comparison.max_abs_error, max_rel_error=comparison.max_rel_error,
                  tolerance=tolerance, compile_s=compile_s, device=device)
    if not comparison.baseline_finite:
        return Verification(status="not-verifiable-here", note="the baseline's outputs contain NaN or Inf, "
                            "so equal numerics cannot be checked", **errors)
    if not comparison.within(tolerance):
        what = comparison.detail or (f"outputs differ by {comparison.max_rel_error:.3g} of their magnitude "
                                     f"(max abs {comparison.max_abs_error:.3g}), more than the {tolerance:g} allowed")
        return Verification(status="numerics-failed", note="; ".join(p for p in (what, raised) if p), **errors)
    note = "; ".join(p for p in (_numerics_note(target, comparison), raised) if p)
    if rewrite is not None and (what := rewrite.described()):
        note += f"; the candidate rewrote {what}"
    return measure(target, base_step, cand_step, budget, progress, label, pairs, errors, note)


def _interleaved(target: Target, base_step: Callable[[], Any], cand_step: Callable[[], Any], budget: Budget,
                 progress: Callable[[str], None], label: str, pairs: int | None, fields: dict,
                 note: str) -> Verification:
    """Both steps warmed up, then timed in interleaved pairs: the A/B every measurement of a change shares."""
    for _ in range(WARMUP_STEPS):
        base_step()
        cand_step()
    progress(f"{label}: timing baseline and candidate, interleaved")
    return _measured(interleave(base_step, cand_step, target.device, **_pairs(budget, pairs)), fields, note=note)


def _memory_measured(target: Target, base_step: Callable[[], Any], cand_step: Callable[[], Any], budget: Budget,
                     progress: Callable[[str], None], label: str, pairs: int | None, fields: dict,
                     note: str) -> Verification:
    """A memory fix: both steps warmed up, each side's peak over the same steps alternately (the verdict), then
    the interleaved pairs for what the fix costs the step's time (reported beside the peaks, never as a gain)."""
    for _ in range(WARMUP_STEPS):
        base_step()
        cand_step()
    progress(f"{label}: the peak memory of baseline and candidate, alternately")
    try:
        base_peaks, cand_peaks = peaks_alternately(base_step, cand_step, target.device)
    except PeakUnmeasurable as busy:
        return Verification(status="not-verifiable-here", note=f"{note}; {busy}", **fields)
    status, why = memory_verdict(base_peaks, cand_peaks)
    progress(f"{label}: what the fix costs the step's time, interleaved")
    ab = interleave(base_step, cand_step, target.device, **_pairs(budget, pairs))
    low, high = ab.interval()
    memory = PeakMemoryAB(method=PEAK_METHOD[target.device.type == "cuda"], baseline_peak_bytes=base_peaks,
                          candidate_peak_bytes=cand_peaks, ratio=round(max(cand_peaks) / max(max(base_peaks), 1), 4),
                          time_ratio=round(1 / ab.speedup, 4), time_low=round(1 / high, 4), time_high=round(1 / low, 4))
    return Verification(status=status, memory=memory, note="; ".join(n for n in (why, note) if n),
                        baseline_ms=round(statistics.median(ab.baseline_ms), 4),
                        candidate_ms=round(statistics.median(ab.candidate_ms), 4), samples=len(ab.baseline_ms),
                        conditions=ab.conditions, **fields)


def _first_result(target: Target, model: torch.nn.Module, feed: Feed, step: Callable[[], Any]) -> list[torch.Tensor]:
    """The values to compare, from the feed's first batch; in training a forward + backward on the
    same copy the timing uses."""
    if target.mode == "train":
        return gradients_after(make_step(target, model, feed, None), model)
    return outputs_after(step)


def _numerics_note(target: Target, comparison) -> str:
    what = "loss and gradients" if target.mode == "train" else "outputs"
    return f"{what} match within {comparison.max_rel_error:.2g} of their magnitude"


def _pairs(budget: Budget, pairs: int | None) -> dict:
    """How long to interleave: a share of the budget (at least MIN_PAIRS pairs), or exactly ``pairs``."""
    if pairs:
        return {"budget_s": float("inf"), "min_pairs": pairs, "max_pairs": pairs}
    return {"budget_s": max(1.0, budget.left * PER_FIX_SHARE), "min_pairs": MIN_PAIRS}


def _verify_loader(target: Target, candidate: Target, budget: Budget,
                   progress: Callable[[str], None], label: str, pairs: int | None = None) -> Verification:
    """Data + step throughput over real batches, baseline loader against the rebuilt one."""
    device = str(target.device)
    if target.get_dataloader is None:
        return Verification(status="not-verifiable-here", device=device, note="the model file has no get_dataloader()")
    try:
        base = _LoaderPipeline(target)
        cand = _LoaderPipeline(candidate)
    except TypeError as unsupported:
        return Verification(status="not-verifiable-here", device=device, note=str(unsupported))
    try:
        base.chunk()
        cand.chunk()  # starts the workers; persistent ones stay up
        progress(f"{label}: timing data + step, interleaved")
        ab = interleave(base.chunk, cand.chunk, target.device, **_pairs(budget, pairs))
    finally:
        base.close()
        cand.close()
    return _measured(ab, {"device": device, "timed": "loader chunk"},
                     note=f"time for {LOADER_CHUNK} batches (loading + step) each sample; the model step is "
                          f"unchanged, only the loader's settings ({candidate.loader_options}) differ")


class _LoaderPipeline:
    def __init__(self, target: Target):
        self.loader = target.loader()
        self.iterator = iter(self.loader)
        self.step = make_step(target, *target.fresh())
        self.device = target.device

    def chunk(self) -> None:
        for _ in range(LOADER_CHUNK):
            try:
                batch = next(self.iterator)
            except StopIteration:
                self.iterator = iter(self.loader)
                batch = next(self.iterator)
            if self.device.type != "cpu":  # the host-to-device copy is part of the pipeline
                tree_map(lambda v: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v, batch)
            self.step()

    def close(self) -> None:
        self.iterator = None  # ends non-persistent workers
        self.loader = None


def _measured(ab, fields: dict, note: str) -> Verification:
    low, high = ab.interval()
    status = verdict(ab.speedup, (low, high))
    if status == "inconclusive":
        note = "; ".join(n for n in (note, why_inconclusive(ab.speedup, (low, high))) if n)
    settled = (f"measured after {ab.settled_pairs} pairs in which the steps were still getting faster"
               if getattr(ab, "settled_pairs", 0) else "")
    note = "; ".join(n for n in (note, settled, resolution_note((low, high))) if n)
    return Verification(
        status=status, resolves=smallest_resolvable((low, high)),
        speedup=round(ab.speedup, 4), ci_low=round(low, 4), ci_high=round(high, 4),
        baseline_ms=round(statistics.median(ab.baseline_ms), 4),
        candidate_ms=round(statistics.median(ab.candidate_ms), 4),
        samples=len(ab.baseline_ms), note=note, conditions=ab.conditions, **fields,
    )


def verify_patched(target: Target, patched_file: str, tolerance: float | None, budget: Budget,
                   progress: Callable[[str], None], pairs: int | None = None,
                   deadline_s: float = 60.0, through_loader: bool = False,
                   flags_before: dict[str, Any] | None = None) -> Verification:
    """The patched copy of the user's files, loaded as its own target beside the original, measured as a
    fix's candidate is. The original's neighbour modules are set aside first, so the copy imports its own
    (patched) ones; the original's objects keep theirs. The library flags are set back to ``flags_before``
    (as before any user file was imported) while the patched file is imported, so it starts from what the
    original started from."""
    import os
    import sys

    from advisor.workload.target import load_target

    as_loaded = process_flags()  # the original's module-level settings: the process keeps them for the baseline
    original_dir = os.path.dirname(target.path) + os.sep
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(original_dir):
            del sys.modules[name]
    patched_dir = os.path.dirname(os.path.abspath(patched_file))
    sys.path[:] = [patched_dir] + [entry for entry in sys.path if os.path.abspath(entry or ".") != original_dir.rstrip(os.sep)]
    if flags_before is not None:
        restore_flags(flags_before)
    try:
        candidate = load_target(patched_file, target.mode, str(target.device), deadline_s)
        candidate.prepare_feed(deadline_s)
    except Exception as broken:  # noqa: BLE001 - the patched file is user code too
        return Verification(status="fix-failed", device=str(target.device),
                            note=f"the patched file did not load: {type(broken).__name__}: {broken}")
    finally:
        patched_flags = process_flags()
        restore_flags(as_loaded)
    candidate = _with_own_flags(candidate, as_loaded, patched_flags)
    try:
        if through_loader:  # the edit changes the loader: data + step over real batches, as a loader fix is
            return _verify_loader(target, candidate, budget, progress, "patched source", pairs)
        return _verify_step(target, candidate, tolerance, budget, progress, "patched source", None, pairs)
    except Exception as broken:  # noqa: BLE001
        return Verification(status="fix-failed", device=str(target.device), tolerance=tolerance,
                            note=f"the patched copy raised {type(broken).__name__}: {str(broken).splitlines()[0] if str(broken) else ''}")


def _flag_accessors() -> dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]:
    """The process-wide settings a file may set as it is imported (library flags at the top of a script)."""
    import torch.backends.cudnn as cudnn

    def attribute_of(owner: Any, name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))
    return {
        "threads": (torch.get_num_threads, torch.set_num_threads),
        "anomaly": (torch.is_anomaly_enabled, torch.autograd.set_detect_anomaly),
        "matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "deterministic": (torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
        "cudnn.benchmark": attribute_of(cudnn, "benchmark"),
        "cudnn.deterministic": attribute_of(cudnn, "deterministic"),
        "cudnn.allow_tf32": attribute_of(cudnn, "allow_tf32"),
        "cuda.matmul.allow_tf32": attribute_of(torch.backends.cuda.matmul, "allow_tf32"),
    }


def process_flags() -> dict[str, Any]:
    return {name: get() for name, (get, _) in _flag_accessors().items()}


def restore_flags(flags: dict[str, Any]) -> None:
    accessors = _flag_accessors()
    for name, value in flags.items():
        if accessors[name][0]() != value:
            accessors[name][1](value)


def _with_own_flags(candidate: Target, baseline_flags: dict[str, Any], own: dict[str, Any]) -> Target:
    """Loading both files in one process would leave the patched file's flags on the baseline too (or the
    original's on the candidate): the candidate's steps run with the settings its own import made, the
    baseline's with the original's, switched at each step as a fix's flags are."""
    from advisor.rulekit.fixing import setting, with_switches

    accessors = _flag_accessors()
    switches = [setting(*accessors[name], value) for name, value in own.items() if baseline_flags[name] != value]
    return with_switches(candidate, *switches) if switches else candidate
