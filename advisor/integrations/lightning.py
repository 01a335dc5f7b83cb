"""``Trainer(callbacks=[AdvisorCallback(out="reports")])``: a Lightning fit audited from within
(``in_process.InProcessAudit``); the report is written once the window's steps are measured (or when the fit ends
first) and the fit goes on untouched. Its fixes are said as the Trainer's settings or the LightningModule's hooks
where one applies them (``framework_advice.py``)."""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package's name
    from pytorch_lightning import Callback

from advisor.integrations.in_process import VERIFY_BUDGET_S, InProcessAudit
from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS


class AdvisorCallback(Callback):
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS, verify: bool = True, budget_s: float = VERIFY_BUDGET_S,
                 pairs: int | None = None):
        """``verify``: measure each fix that can be switched between two steps in the training's own later steps
        (``in_run_verification.py``); ``budget_s``: the seconds of training those measurements may take; ``pairs``:
        exactly this many pairs of blocks per fix instead, whatever the time."""
        self.audit = InProcessAudit(out, warmup_steps, steps, profile_steps, verify=verify, budget_s=budget_s,
                                    pairs=pairs)

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
