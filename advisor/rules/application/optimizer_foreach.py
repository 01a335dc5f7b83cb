"""The optimizer updates its parameters one tensor at a time.

What it detects:
    A training step whose optimizer (Adam, AdamW, SGD, Adagrad, RMSprop, ...) runs its
    single-tensor implementation — ``foreach=False``, or the default on a CPU, where
    PyTorch does not pick foreach — while a ``fused`` or ``foreach`` implementation exists,
    over at least ``min_tensors`` parameter tensors, and ``optimizer.step()`` takes at least
    ``min_share`` of the step (measured from torch.optim's own profiler range).

Why it matters:
    The single-tensor implementation launches several small ops per parameter tensor (for
    AdamW: about ten), so a model with hundreds of tensors pays thousands of launches or
    dispatches per step. ``foreach`` batches each op over all tensors; ``fused`` does the
    whole update in one kernel per group of tensors (on CUDA and, since PyTorch 2.4, CPU).

How to fix:
    Pass ``fused=True`` where the optimizer supports it (Adam, AdamW, SGD, Adagrad), else
    ``foreach=True``.

Example:
    Before::

        torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)

    After::

        torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import FUSED_OPTIMIZERS
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

FOREACH = FUSED_OPTIMIZERS | {"RMSprop", "Adamax", "NAdam", "RAdam", "ASGD", "Adadelta", "Rprop"}


@rule(
    slug="optimizer-foreach",
    code="ADV129",
    layer=Layer.APPLICATION,
    needs=("trace",),
    severity=Severity.MEDIUM,
    thresholds={
        "min_tensors": Threshold(16, "parameter tensors below which per-tensor updates cost little", "count"),
        "min_share": Threshold(0.05, "share of the step spent in optimizer.step()"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    target = ev.target
    name, options = target.optimizer, target.optimizer_options
    if target.mode != "train" or name not in FOREACH or ev.trace is None:
        yield Clean(why="not a training run" if target.mode != "train" else
                    f"no optimizer with a foreach or fused implementation ({name or 'none'})" if name not in FOREACH
                    else "no trace to time the optimizer's step in")
        return
    if options.get("fused") or options.get("foreach") or (options.get("foreach") is None and ev.on_cuda):
        yield Clean(why=f"{name} runs fused or foreach already")  # or the CUDA default (foreach)
        return
    if options.get("differentiable") or target.optimizer_param_tensors < th.min_tensors:
        yield Clean(why="a differentiable optimizer (no foreach path)" if options.get("differentiable") else
                    f"{name} updates {target.optimizer_param_tensors} parameter tensor(s), fewer than "
                    f"{th.min_tensors:g}: batching them saves little")
        return
    if target.step is not None and target.step.counts.get("closures"):
        # the step's span holds the script's closure (its forwards and backwards): not the optimizer's own time
        yield Clean(why=f"{name}.step() runs the script's closure (its forward and backward) inside it, so the "
                        "optimizer's own share of the step cannot be read from its span")
        return
    step_us = ev.trace.median_span_per_step(ev.trace.optimizer_steps)
    profiled_step_us = ev.trace.mean_step_us()
    # a share within the profiled steps: the profiler inflates the optimizer's many small ops as much
    share = min(1.0, step_us / profiled_step_us) if step_us and profiled_step_us else None
    if share is None:
        yield Clean(why="the profiled steps hold no optimizer step to time")
        return
    yield ev.share_margin("optimizer share of the step", share, th.min_share)  # how near it came: reported when the rule stays silent too
    if share < th.min_share:
        return
    better = "fused" if name in FUSED_OPTIMIZERS else "foreach"
    how = "foreach=False" if options.get("foreach") is False else "the CPU default"
    yield Finding(
        message=(f"{name}.step() updates {target.optimizer_param_tensors} parameter tensors one at a time "
                 f"({how}), taking {share:.0%} of the profiled step: {better}=True batches them"),
        impact=share,
        evidence={"optimizer": name, "param_tensors": target.optimizer_param_tensors,
                  "optimizer_profiled_ms_per_step": round(step_us / 1000, 4), "share_of_step": round(share, 4),
                  "foreach": options.get("foreach"), "suggested": better},
        locations=[target.optimizer_call] if target.optimizer_call is not None else [],
        fix=Fix(summary=f"create the optimizer with {better}=True",
                before=f"torch.optim.{name}(model.parameters(), lr=lr)",
                after=f"torch.optim.{name}(model.parameters(), lr=lr, {better}=True)",
                docs=["https://pytorch.org/docs/stable/optim.html#algorithms",
                      "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]),
    )


@check.fix(tolerance=1e-5, what="fused / foreach optimizer")
def fix(target, finding):
    """The same update rule computed in batched kernels: equal up to float rounding."""
    return replace_target(target, optimizer_options={**target.optimizer_options, **_overrides(finding)})


def _overrides(finding):
    """fused=True (foreach left to its default) where the optimizer has a fused kernel, else foreach=True."""
    return {"fused": True, "foreach": None} if finding.evidence["suggested"] == "fused" else {"foreach": True}


@check.patch(what="foreach=True / fused=True at the optimizer's constructor")
def patch(files, finding):
    """The one constructor of the finding's optimizer class in the entry file, with the batched update."""
    source = files.read(files.entry)
    call = source.only_call((finding.evidence["optimizer"],))
    return [source.set_keywords(call, **_overrides(finding))]
