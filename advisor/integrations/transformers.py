"""``Trainer(..., callbacks=[AdvisorCallback(out="reports")])``: the Hugging Face Trainer's training audited from
within (``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when
training ends first) and the training goes on untouched."""

from __future__ import annotations

from transformers import TrainerCallback

from advisor.integrations.in_process import InProcessAudit
from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS


class AdvisorCallback(TrainerCallback):
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS):
        self.audit = InProcessAudit(out, warmup_steps, steps, profile_steps)

    def on_train_begin(self, args, state, control, **kwargs):
        self.audit.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.audit.measured:
            self.audit.finish()

    def on_train_end(self, args, state, control, **kwargs):
        self.audit.finish()
