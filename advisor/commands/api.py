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

from advisor.assembly.build import assemble_report
from advisor.assembly.verification import verify_findings
from advisor.capture.collect import gather_capture
from advisor.capture.stages import CAPTURE
from advisor.report.schema import Report, VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.sandbox.inline import run_inline
from advisor.sandbox.specs import CaptureSpec
from advisor.workload.target import Target, resolve_device


def audit(
    model: torch.nn.Module,
    inputs: Any,
    *,
    get_optimizer: Callable[[torch.nn.Module], Any] | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    get_dataloader: Callable[[], Any] | None = None,
    inputs_from_batch: Callable[[Any], Any] | None = None,
    mode: str = "auto",
    device: str = "auto",
    verify: bool = True,
    budget: float = 60.0,
    pairs: int | None = None,
    rules: tuple[str, ...] = (),
    settings: tuple[str, ...] = (),
    disable: tuple[str, ...] = (),
    trace_dir: str | None = None,
) -> Report:
    """Audit a live model on one batch of ``inputs`` (Tensor, tuple -> *args, dict -> **kwargs), or,
    with ``get_dataloader``, on the loader's real batches (``inputs`` may then be None). The trace is
    written to ``trace_dir``, or else to a temporary folder that is kept (the report links to it). Fixes are
    measured within ``budget`` seconds, or with exactly ``pairs`` interleaved pairs each, however long that takes."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model is a {type(model).__name__}, not a torch.nn.Module")
    if inputs is None and get_dataloader is None:
        raise TypeError("inputs is None and there is no get_dataloader: the model has nothing to run on")
    config = RuleConfig.load(rules, settings, disable)
    if mode == "auto":
        mode = "train" if get_optimizer is not None else "inference"
    target = Target(path="<python>", module=None, model=model, inputs=inputs, mode=mode,
                    device=resolve_device(device), get_dataloader=get_dataloader,
                    get_optimizer=get_optimizer, loss_fn=loss_fn, inputs_from_batch=inputs_from_batch)
    trace_path = os.path.join(trace_dir or tempfile.mkdtemp(prefix="advisor-api-"), f"{type(model).__name__}.trace.json.gz")
    state = {"spec": CaptureSpec(model_file="<python>", trace_path=trace_path), "target": target}
    run = run_inline(state, CAPTURE)
    gathered = gather_capture(run, "<python>")
    errors = gathered.errors
    report = assemble_report(gathered, config, VerificationSettings(enabled=verify, budget_s=budget, pairs=pairs))

    def measure(findings):
        from advisor.verify.copies import measure_here

        return measure_here(target, config.ruleset, findings, budget, pairs)

    verify_findings(report, config, errors, measure)
    return report
