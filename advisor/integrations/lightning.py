"""``Trainer(callbacks=[AdvisorCallback(out="reports")])``: a Lightning fit audited from within
(``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when the fit ends
first) and the fit goes on untouched."""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package's name
    from pytorch_lightning import Callback

from advisor.integrations.in_process import InProcessAudit
from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS


class AdvisorCallback(Callback):
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS):
        self.audit = InProcessAudit(out, warmup_steps, steps, profile_steps)

    def on_train_start(self, trainer, pl_module):
        self.audit.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.audit.measured:
            self.audit.finish()

    def on_train_end(self, trainer, pl_module):
        self.audit.finish()
