"""``Trainer(..., callbacks=[AdvisorCallback(out="reports")])``: the Hugging Face Trainer's training audited from
within (``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when
training ends first) and the training goes on untouched. Its fixes are said as TrainingArguments where one applies
them (``framework_advice.py``)."""

from __future__ import annotations

from transformers import TrainerCallback

from advisor.integrations.in_process import AuditingCallback

# the TrainingArguments the advice reads: what the training runs with before it is told to change
SETTINGS = ("bf16", "fp16", "tf32", "torch_compile", "dataloader_num_workers", "dataloader_pin_memory",
            "ddp_find_unused_parameters", "logging_nan_inf_filter")


class AdvisorCallback(AuditingCallback, TrainerCallback):
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
