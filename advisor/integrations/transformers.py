"""``Trainer(..., callbacks=[AdvisorCallback(out="reports")])``: the Hugging Face Trainer's training audited from
within (``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when
training ends first) and the training goes on untouched. Its fixes are said as TrainingArguments where one applies
them (``framework_advice.py``)."""

from __future__ import annotations

from transformers import TrainerCallback

from advisor.integrations.in_process import VERIFY_BUDGET_S, InProcessAudit
from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS

# the TrainingArguments the advice reads: what the training runs with before it is told to change
SETTINGS = ("bf16", "fp16", "tf32", "torch_compile", "dataloader_num_workers", "dataloader_pin_memory",
            "ddp_find_unused_parameters", "logging_nan_inf_filter")


class AdvisorCallback(TrainerCallback):
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS, verify: bool = True, budget_s: float = VERIFY_BUDGET_S,
                 pairs: int | None = None):
        """``verify``: measure each fix that can be switched between two steps in the training's own later steps
        (``in_run_verification.py``); ``budget_s``: the seconds of training those measurements may take; ``pairs``:
        exactly this many pairs of blocks per fix instead, whatever the time."""
        self.audit = InProcessAudit(out, warmup_steps, steps, profile_steps, verify=verify, budget_s=budget_s,
                                    pairs=pairs)

    def on_train_begin(self, args, state, control, **kwargs):
        from advisor.integrations.framework_advice import TrainingSettings, entry_line

        optim = getattr(args, "optim", "")
        self.audit.settings = TrainingSettings("transformers", {
            **{name: getattr(args, name) for name in SETTINGS if hasattr(args, name)},
            "optim": getattr(optim, "value", optim)}, entry=entry_line())  # optim: an OptimizerNames member
        self.audit.start()

    def on_step_end(self, args, state, control, **kwargs):
        self.audit.at_step_end()

    def on_train_end(self, args, state, control, **kwargs):
        self.audit.training_ended()
