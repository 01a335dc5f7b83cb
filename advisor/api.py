"""advisor from Python (notebooks, scripts): ``advisor.audit(model, inputs)``.

Runs the same stages, rules and verification as ``advisor audit``, in this process (there is no
model file to run in a child): a hang or crash of the model is not contained here. The model
and inputs passed in are never modified: every stage works on deep copies.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

import torch

from advisor import __version__
from advisor.pipeline import build_evidence
from advisor.capture.supervisor import CaptureRun, StageOutcome
from advisor.capture.worker import STAGES, describe_target, run_stage
from advisor.engine import check_disabled, load_rules, parse_settings, run_rules
from advisor.report.model import ModelOutput, Report, RuleProblemRecord, StageRecord, VerificationSettings
from advisor.report.summarize import summarize_graph, summarize_performance, summarize_trace
from advisor.target import Target, resolve_device


def audit(
    model: torch.nn.Module,
    inputs: Any,
    *,
    get_optimizer: Callable[[torch.nn.Module], Any] | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    get_dataloader: Callable[[], Any] | None = None,
    mode: str = "auto",
    device: str = "auto",
    verify: bool = True,
    budget: float = 60.0,
    rules: tuple[str, ...] = (),
    settings: tuple[str, ...] = (),
    disable: tuple[str, ...] = (),
    trace_dir: str | None = None,
) -> Report:
    """Audit a live model on one batch of ``inputs`` (Tensor, tuple -> *args, dict -> **kwargs)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model is a {type(model).__name__}, not a torch.nn.Module")
    ruleset = load_rules(rules)
    overrides = parse_settings(ruleset, settings)
    disabled = check_disabled(ruleset, disable)
    if mode == "auto":
        mode = "train" if get_optimizer is not None else "inference"
    target = Target(path="<python>", module=None, model=model, inputs=inputs, mode=mode,
                    device=resolve_device(device), get_dataloader=get_dataloader,
                    get_optimizer=get_optimizer, loss_fn=loss_fn)
    workdir = tempfile.mkdtemp(prefix="advisor-api-")
    trace_path = os.path.join(trace_dir or workdir, f"{type(model).__name__}.trace.json.gz")
    run = _run_inline(target, {"trace_path": trace_path}, workdir)
    evidence, errors = build_evidence(run, "<python>")
    findings, problems = run_rules(ruleset, evidence, overrides, disabled)
    report = Report(
        advisor_version=__version__, target=evidence.target, environment=evidence.env, timing=evidence.timing,
        data=evidence.data, flops=evidence.flops, performance=summarize_performance(evidence), findings=findings,
        errors=errors, stages=[StageRecord(stage=o.stage, status=o.status, note=o.note) for o in run.outcomes.values()],
        rule_problems=[RuleProblemRecord(source=p.source, message=p.message) for p in ruleset.problems + problems],
        output=ModelOutput(), verification=VerificationSettings(enabled=verify, budget_s=budget),
    )
    if evidence.trace is not None:
        report.trace = summarize_trace(evidence.trace)
    if evidence.graph is not None:
        report.graph = summarize_graph(evidence.graph)
    if verify and findings and not errors:
        from advisor.verify.run import verify_all

        order = sorted(range(len(findings)), key=lambda i: -(findings[i].impact or 0.0))
        results, combined = verify_all(target, ruleset, [(i, findings[i]) for i in order], budget)
        for index, outcome in results.items():
            report.findings[index].verification = outcome
        report.verification.combined = combined
    return report


def _run_inline(target: Target, spec: dict, workdir: str) -> CaptureRun:
    """The worker's stages, in this process; results go through the same JSON as the child's."""
    state = {"spec": spec, "target": target}
    run = CaptureRun(workdir=workdir)
    loaded = os.path.join(workdir, "load.json")
    with open(loaded, "w", encoding="utf-8") as handle:
        handle.write(describe_target(target).model_dump_json())
    run.outcomes["load"] = StageOutcome("load", "ok", result_path=loaded)
    for stage in STAGES[1:]:
        outcome, payload = run_stage(state, stage, lambda text: None)
        if outcome == "ok":
            path = os.path.join(workdir, f"{stage}.json")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(payload)
            run.outcomes[stage] = StageOutcome(stage, "ok", result_path=path)
        elif outcome == "skipped":
            run.outcomes[stage] = StageOutcome(stage, "skipped", note=payload)
        else:
            run.outcomes[stage] = StageOutcome(stage, "error", error=payload)
    return run
