"""A rule's fix carried out inside a verification run of the unmodified script.

The fix is the rule's own, the one ``audit`` measures: called on a Target describing the script's
model, it returns a new Target (see ``advisor.rulekit.fixing``), and its changes are made here, on the
script's live objects, in a throwaway process of the script:

- at once, before the script builds anything: library flags and silenced calls (the Target's
  step switches, entered for the whole run, and again at the model's first call), anomaly mode,
  DataLoader options;
- when the script builds DistributedDataParallel: the fix's keyword options, and no_sync on every
  micro-step but the last of each optimizer step;
- at the optimizer's first step: its parameter groups' options (foreach, fused);
- at the model's first call: transforms, channels_last (model and 4-D inputs), torch.compile
  (with the fix's graph rewrite, if any) and autocast around its forward.

The model is recognised by its class and parameter count, as the audit run described it. What
cannot be injected (a GradScaler around the script's own backward) raises NotVerifiable.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from advisor.rulekit.rule import NotVerifiable
from advisor.run.window_spec import AuditedModel, WindowSpec
from advisor.workload.target import Target, single_process_consistent, to_channels_last


def fixed_target(spec: WindowSpec) -> tuple[Target, Target]:
    """(the script's target as it is, the target with every fix in ``spec.fixes`` applied)."""
    from advisor.rulekit.engine import load_rules

    baseline = Target(path=spec.script, module=None, model=None, inputs=None,
                      mode="train" if spec.mode == "train" else "inference", device=torch.device(spec.device or "cpu"))
    candidate = baseline
    ruleset = load_rules(spec.rule_dirs) if spec.fixes else None
    for finding in spec.fixes:
        rule = ruleset.get(finding.slug)
        if rule is None or rule.fix_spec is None or rule.fix_spec.apply is None:
            raise NotVerifiable(f"the rule {finding.slug} has no fix to apply")
        candidate = rule.fix_spec.apply(candidate, finding)
    if candidate.grad_scaler:
        raise NotVerifiable("fp16 autocast needs a GradScaler around the script's own backward and optimizer "
                            "step, which advisor run cannot inject; audit the model file to measure it")
    if candidate.float32_inputs:
        raise NotVerifiable("the script makes its own tensors, which advisor run cannot cast to float32; make them "
                            "float32 where they come in (or audit a model file) to measure it")
    return baseline, candidate


class Injection:
    """The changes from ``baseline`` to ``candidate``, made on the running script."""

    def __init__(self, baseline: Target, candidate: Target):
        from advisor.verify.compiled import WatchedRewrite

        self.candidate = candidate
        self.rewrite = WatchedRewrite(candidate.compile_backend) if candidate.compile_backend is not None else None
        self.changes_model = bool(candidate.model_transforms or candidate.channels_last or candidate.compiled
                                  or candidate.autocast_dtype is not None)
        self.changes_loader = candidate.loader_options != baseline.loader_options
        self.changes_optimizer = bool(candidate.optimizer_options)
        self.changes_ddp = bool(candidate.ddp_options or candidate.ddp_sync_every)
        self.switches = contextlib.ExitStack()
        self.lasting = contextlib.ExitStack()  # what holds for the whole run (left only in a user's own training)
        self.model_fixed = False

    def apply_now(self, switched: bool = False) -> None:
        """What must be in place before the script builds its model, loader and optimizer (``switched``:
        the flags and the loaders are the switch's to set, block by block)."""
        candidate = self.candidate
        if not switched:
            self.enter_switches()
        if candidate.detect_anomaly is not None:
            torch.autograd.set_detect_anomaly(candidate.detect_anomaly)
            torch.autograd.set_detect_anomaly = lambda *args, **kwargs: None  # the script's own call is the fix's target
        if self.changes_loader and not switched:
            _rebuild_loaders_with(candidate.loader_options)
        if self.changes_ddp:
            _rebuild_ddp_with(candidate.ddp_options, candidate.ddp_sync_every)
        if candidate.compiled:
            from advisor.verify.compiled import eager_random_in_compiled_code

            self.lasting.enter_context(eager_random_in_compiled_code())  # dropout draws as eager code's: results compare

    def enter_switches(self) -> None:
        """The fix's flags and silenced calls, for the rest of the run (the process is the candidate's
        own). Entered again at the model's first call: a script's own setting (``torch.set_num_threads``,
        ``cudnn.benchmark = False``) made during its set-up must not undo the fix."""
        for switch in self.candidate.step_contexts:
            self.switches.enter_context(switch())

    def fix_optimizer(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            group.update(self.candidate.optimizer_options)

    def fix_model(self, model: torch.nn.Module) -> None:
        """Transforms, layout, compilation and precision, on the live model before its first forward."""
        forward = self.fixed_forward(model)
        if forward is not model.forward:
            model.forward = forward
        self.model_fixed = True

    def fixed_forward(self, model: torch.nn.Module) -> Callable[..., Any]:
        """The model's forward with the fix: its transforms and layout made on the model, its compilation
        and precision around the forward it had (``switched.py`` keeps both and swaps them)."""
        candidate = self.candidate
        for transform in candidate.model_transforms:
            transform(model)
        forward: Callable[..., Any] = model.forward
        if candidate.channels_last:
            model.to(memory_format=torch.channels_last)
            forward = _with_inputs(forward, to_channels_last)
        if candidate.compiled:
            options: dict[str, Any] = {"mode": candidate.compile_mode} if candidate.compile_mode not in (None, "default") else {}
            if self.rewrite is not None:
                options["backend"] = self.rewrite
            forward = torch.compile(forward, **options)
        if candidate.autocast_dtype is not None:
            forward = _under_autocast(forward, candidate.device.type, candidate.autocast_dtype)
        return forward


def why_not_switched(baseline: Target, candidate: Target) -> str:
    """Why this fix cannot be switched on and off between two steps of one run (``switched.py``), or ""."""
    if candidate.ddp_options or candidate.ddp_sync_every:
        return "DistributedDataParallel's options are fixed when the script wraps its model"
    if candidate.channels_last:
        return "channels_last changes the parameters' layout, which the optimizer's state follows"
    if candidate.model_transforms:
        return "the fix changes the model's own modules"
    if candidate.detect_anomaly is not None:
        return "anomaly mode is the script's own setting, made once"
    return ""


def _with_inputs(forward: Callable[..., Any], convert: Callable[[Any], Any]) -> Callable[..., Any]:
    from torch.utils._pytree import tree_map

    def converted(*args, **kwargs):
        return forward(*tree_map(convert, args), **tree_map(convert, kwargs))
    return converted


def _under_autocast(forward: Callable[..., Any], device_type: str, dtype: torch.dtype) -> Callable[..., Any]:
    def autocast_forward(*args, **kwargs):
        with torch.autocast(device_type=device_type, dtype=dtype):
            return forward(*args, **kwargs)
    return autocast_forward


def _rebuild_loaders_with(overrides: dict[str, Any]) -> None:
    """Every DataLoader the script builds gets these keyword options (workers, pinning, ...)."""
    from torch.utils.data import DataLoader

    original = DataLoader.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **single_process_consistent({**kwargs, **overrides}))
    DataLoader.__init__ = init


def _rebuild_ddp_with(overrides: dict[str, Any], sync_every: int) -> None:
    """Every DistributedDataParallel the script builds gets these keyword options; with ``sync_every``,
    only the n-th forward after each optimizer step all-reduces (the others run as under no_sync)."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook

    original = DistributedDataParallel.__init__
    since_step = [0]
    if sync_every:
        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: since_step.__setitem__(0, 0))

    def init(ddp, *args, **kwargs):
        original(ddp, *args, **{**kwargs, **overrides})
        if sync_every:
            def forward(module, inputs):
                if torch.is_grad_enabled():
                    since_step[0] += 1
                    module.require_backward_grad_sync = since_step[0] >= sync_every
            ddp.register_forward_pre_hook(forward)
    DistributedDataParallel.__init__ = init


def on_first_call(matches: Callable[[torch.nn.Module], bool], found: Callable[[torch.nn.Module], None]) -> None:
    """Call ``found(module)`` just before the first call of a module that ``matches``, so even that
    call runs as ``found`` left the module. Module calls are watched only until then."""
    module_type = torch.nn.Module
    original = module_type.__call__

    def finder(module, *args, **kwargs):
        if matches(module):
            module_type.__call__ = original
            found(module)
        return original(module, *args, **kwargs)
    module_type.__call__ = finder


def model_matcher(described: AuditedModel) -> Callable[[torch.nn.Module], bool]:
    """The audit run's model: the same class with the same number of parameters (0: not counted)."""
    name, count = described.class_name, described.params or None

    def matches(module: torch.nn.Module) -> bool:
        if type(module).__qualname__ != name:
            return False
        return count is None or sum(p.numel() for p in module.parameters()) == count
    return matches
