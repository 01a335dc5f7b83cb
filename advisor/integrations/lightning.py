"""``Trainer(callbacks=[AdvisorCallback(out="reports")])``: a Lightning fit audited from within
(``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when the fit ends
first) and the fit goes on untouched. Its fixes are said as the Trainer's settings or the LightningModule's hooks
where one applies them (``framework_advice.py``)."""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package's name
    from pytorch_lightning import Callback

from advisor.integrations.in_process import AuditingCallback


class AdvisorCallback(AuditingCallback, Callback):
    def on_train_start(self, trainer, pl_module):
        from advisor.integrations.framework_advice import TrainingSettings, entry_line

        self.audit.settings = TrainingSettings("lightning", {"precision": str(getattr(trainer, "precision", "")),
                                                             "strategy": type(trainer.strategy).__name__},
                                               entry=entry_line())
        self.audit.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.audit.at_step_end()

    def on_train_end(self, trainer, pl_module):
        self.audit.training_ended()
